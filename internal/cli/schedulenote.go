package cli

import (
	"cmp"
	"fmt"
	"os"
)

// pauseNote is the note `schedule pause|unpause` records on the schedule:
// the user's note with who did it, as `schedule list` and `describe` (and
// the Web UI) show it: "lake migration (paused by alice via retrain CLI
// 4242@build-1)". The user is $RETRAIN_USER, else the login name (as for approve);
// the CLI identity is the Temporal SDK's default one, pid@host.
func pauseNote(verb, note string) string {
	who := fmt.Sprintf("%s by %s via retrain CLI %s", verb, cmp.Or(currentUser(), "an unknown user"), cliIdentity())
	if note == "" {
		return who
	}
	return fmt.Sprintf("%s (%s)", note, who)
}

func cliIdentity() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%d@%s", os.Getpid(), cmp.Or(host, "localhost"))
}
