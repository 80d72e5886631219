package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runCLIErr(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	app := &App{Out: &out, Err: &errOut, LogLevel: "warn"}
	root := NewRoot(app, "retrain")
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestTableMaintain drives `retrain table maintain` on the demo data: bad
// input is refused before anything changes, a dry run changes nothing,
// and a real run keeps the rows.
func TestTableMaintain(t *testing.T) {
	dir := t.TempDir()
	runCLI(t, "data", "demo", "--data-dir", dir, "--rows", "800", "--days", "2", "--users", "100", "--ads", "20")
	sum := runCLI(t, "table", "scan", "ml.training", "--checksum", "--data-dir", dir)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ml.nope", "--compact"}, "does not exist"},
		{[]string{"ml.training", "--keep-last", "-1", "--models=false"}, "--keep-last -1"},
		{[]string{"ml.training", "--expire-older-than", "3x"}, "--expire-older-than"},
		{[]string{"ml.training", "--orphan-margin", "0", "--remove-orphans"}, "--orphan-margin must be positive"},
		{[]string{"ml.training", "--expire-older-than", "off"}, "nothing to do"},
		{[]string{"ml.training", "--keep-snapshot", "x1", "--models=false"}, "--keep-snapshot"},
		// No dev stack runs on dir: no registry to read model versions from.
		{[]string{"ml.training"}, "--models=false"},
	} {
		out, err := runCLIErr(append([]string{"table", "maintain", "--data-dir", dir}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("maintain %v: %v (want %q)\n%s", c.args, err, c.want, out)
		}
	}
	args := []string{"table", "maintain", "ml.training", "--data-dir", dir, "--models=false", "--expire-older-than", "0", "--keep-last", "0", "--remove-orphans", "--compact"}
	dry := runCLI(t, append(args, "--dry-run")...)
	if !strings.Contains(dry, "dry run: nothing was changed") || !strings.Contains(dry, "ml.training: snapshots 1 -> 1") {
		t.Errorf("dry run: %s", dry)
	}
	out := runCLI(t, args...)
	if !strings.Contains(out, "expire: expired 0 snapshots") || !strings.Contains(out, "compact: no partition has small files") || strings.Contains(out, "dry run") {
		t.Errorf("maintain: %s", out)
	}
	if again := runCLI(t, "table", "scan", "ml.training", "--checksum", "--data-dir", dir); again != sum {
		t.Errorf("maintain changed the rows: %s vs %s", sum, again)
	}
}
