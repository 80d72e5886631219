package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestSourceConfined: with --allow-paths, a source outside the allowed
// folders, or a link inside one leading out, fails as bad input naming
// the path and the flag; a source inside is checkpointed. A command's
// secret is masked in the error quoting its stderr.
func TestSourceConfined(t *testing.T) {
	_, st, _ := newCheckpoints(t)
	allowed, outside := t.TempDir(), t.TempDir()
	for _, d := range []string{allowed, outside} {
		if err := os.WriteFile(filepath.Join(d, "a.csv"), []byte("id\n1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "a.csv"), filepath.Join(allowed, "link.csv")); err != nil {
		t.Fatal(err)
	}
	typ := TypeWith(Deps{Store: st, Logger: quiet, Env: progenv.Policy{AllowPaths: []string{allowed}}})
	runIt := func(with map[string]any) error {
		_, err := typ.Run(t.Context(), nodetype.Input{Pipeline: "p", RunID: "r", Node: "n", Type: Name, With: with, Secrets: nodetest.SpecSecrets(with)})
		return err
	}
	for _, src := range []string{outside, filepath.Join(allowed, "..", filepath.Base(outside), "a.csv"), filepath.Join(allowed, "*.csv")} {
		err := runIt(map[string]any{"source": src, "dataset": "d"})
		if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "--allow-paths") {
			t.Errorf("source %s: %v", src, err)
		}
	}
	if err := runIt(map[string]any{"source": filepath.Join(allowed, "a.csv"), "dataset": "d"}); err != nil {
		t.Errorf("source inside: %v", err)
	}

	t.Setenv("RETRAIN_SECRET_CK", "ck-s3cr3t-31")
	err := runIt(map[string]any{"command": []any{"sh", "-c", `echo "no access with $K" >&2; exit 2`}, "env": map[string]any{"K": "${secret.CK}"}, "dataset": "d"})
	if err == nil || strings.Contains(err.Error(), "ck-s3cr3t-31") || !strings.Contains(err.Error(), "no access with ***") {
		t.Errorf("command error %v", err)
	}
}
