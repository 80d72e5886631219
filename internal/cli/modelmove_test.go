package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/storage"
)

// TestModelMoveForce: `model promote` and `model rollback` follow the
// registry's date rule: a move to an older date is refused with both
// versions and dates and what --force does; --force needs --reason; a
// forced move is recorded as forced.
func TestModelMoveForce(t *testing.T) {
	srv := s3test.Start(t)
	dir := t.TempDir()
	if err := storage.WriteDevConnection(dir, srv.Config("")); err != nil {
		t.Fatal(err)
	}
	reg := models.New(srv.Open(t, ""))
	for v, lt := range map[string]string{"v1": "2026-11-26T00:00:00Z", "v2": "2026-11-28T00:00:00Z"} {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, "w.bin"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := models.DirArtifacts(d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Register(t.Context(), "ctr", a, v, models.Meta{LogicalTime: lt}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) { return runCLIErr(append(args, "--data-dir", dir)...) }
	if _, err := run("model", "promote", "ctr", "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := run("model", "promote", "ctr", "v2"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"model", "rollback", "ctr"}, {"model", "promote", "ctr", "v1"}} {
		_, err := run(args...)
		if err == nil {
			t.Fatalf("%v to an older date succeeded", args)
		}
		for _, want := range []string{"v2, trained for 2026-11-28", "v1, trained for 2026-11-26", "--force --reason"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v: error %q does not say %q", args, err, want)
			}
		}
	}
	if _, err := run("model", "rollback", "ctr", "--force"); err == nil || !strings.Contains(err.Error(), "--force needs --reason") {
		t.Fatalf("--force without --reason: %v", err)
	}
	if v, _ := reg.Resolve(t.Context(), "ctr"); v.Version != "v2" {
		t.Fatalf("refused moves moved production to %s", v.Version)
	}
	out, err := run("model", "rollback", "ctr", "--force", "--reason", "v2 misbehaves")
	if err != nil || !strings.Contains(out, "v2 -> v1 (rollback (forced)") {
		t.Fatalf("forced rollback: %v\n%s", err, out)
	}
	out, err = run("model", "history", "ctr")
	if err != nil || !strings.Contains(out, "rollback (forced)") || !strings.Contains(out, "v2 misbehaves") {
		t.Fatalf("history: %v\n%s", err, out)
	}
	t.Log(out)
}
