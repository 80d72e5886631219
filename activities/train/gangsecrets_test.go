package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/nodetype"
)

// A gang host's ranks get the spec's ${secret.NAME} env resolved, as a
// single-host command does, and what the host reports (its error with the
// rank's stderr) has the value masked.
func TestGangRunResolvesAndMasksSecrets(t *testing.T) {
	const secret = "rank-s3cret-91c"
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "TOK"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	tr := &Trainers{Store: st, Logger: quiet, Env: progenv.Policy{SecretsDir: dir}, Host: Host{ID: "h1", Address: "127.0.0.1"}}
	with := map[string]any{
		"trainer": "command", "data": splittest.Write(t, st, "gs", 100, 20), "hosts": 2.0,
		"env":  map[string]any{"TOK": "${secret.TOK}", "PLAIN": "x"},
		"argv": []any{"sh", "-c", `printf %s "$TOK" > ` + out + `/tok; echo "the token is $TOK" >&2; exit 3`},
	}
	in := nodetype.Input{Pipeline: "p", RunID: "gs", Node: "train", Type: "train", With: with, Secrets: nodetest.SpecSecrets(with)}
	tr.held.put("k", nil, time.Minute)

	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(quiet))
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(tr.GangRun, activity.RegisterOptions{Name: GangRunActivity})
	members := []gang.Member{{Host: "h1", Address: "127.0.0.1", Port: 29511}, {Host: "h2", Address: "127.0.0.1", Port: 29512}}
	_, err := env.ExecuteActivity(GangRunActivity, RunInput{Node: in, Key: "k", Host: 0, Members: members, Processes: 1})
	if err == nil {
		t.Fatal("the rank exited 3, but the host reported success")
	}
	b, rerr := os.ReadFile(filepath.Join(out, "tok"))
	if rerr != nil || string(b) != secret {
		t.Errorf("the rank's TOK is %q (%v): want the secret's value", b, rerr)
	}
	if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "the token is "+nodetype.Mask) {
		t.Errorf("error %q: want the rank's stderr with the secret masked", err)
	}
}
