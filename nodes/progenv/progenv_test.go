package progenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodes/internal/nodetest"
)

func TestBase(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "k")
	t.Setenv("AWS_REGION", "r")
	t.Setenv("HF_HOME", "/hf")
	t.Setenv("LC_ALL", "C")
	t.Setenv("RETRAIN_SECRET_A", "a")
	t.Setenv("PATH", "/usr/bin")
	has := func(env []string, kv string) bool { return slices.Contains(env, kv) }

	base := Policy{}.Base()
	if !has(base, "PATH=/usr/bin") || !has(base, "LC_ALL=C") || has(base, "AWS_REGION=r") || has(base, "HF_HOME=/hf") {
		t.Errorf("base %v", base)
	}
	passed := Policy{PassEnv: []string{"AWS_*", "HF_HOME", "RETRAIN_*"}}.Base()
	if !has(passed, "AWS_SECRET_ACCESS_KEY=k") || !has(passed, "AWS_REGION=r") || !has(passed, "HF_HOME=/hf") {
		t.Errorf("passed %v", passed)
	}
	if has(passed, "RETRAIN_SECRET_A=a") {
		t.Error("a secret variable was passed on")
	}
}

func TestResolve(t *testing.T) {
	t.Setenv("RETRAIN_SECRET_A", "alpha")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "B"), []byte("beta\n"), 0o600)
	p := Policy{SecretsDir: dir}
	e, err := p.Resolve(map[string]string{"X": "${secret.A}:${secret.B}", "Y": "plain", "Z": "$${secret.A}"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.Vars, []string{"X=alpha:beta", "Y=plain", "Z=$alpha"}) || !slices.Equal(e.Secrets, []string{"alpha", "beta"}) {
		t.Errorf("%+v", e)
	}
	_, err = p.Resolve(map[string]string{"X": "${secret.NOPE}"})
	if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "NOPE") || !strings.Contains(err.Error(), dir) {
		t.Errorf("missing: %v", err)
	}
	if got := MaskString("a alpha b", e.Secrets); got != "a *** b" {
		t.Errorf("MaskString %q", got)
	}
}

func TestCheckPath(t *testing.T) {
	root, other := t.TempDir(), t.TempDir()
	os.Symlink(other, filepath.Join(root, "link"))
	p := Policy{AllowPaths: []string{root}}
	for path, ok := range map[string]bool{
		root:                                 true,
		filepath.Join(root, "a/b.csv"):       true,
		filepath.Join(root, "*.csv"):         true,
		filepath.Join(root, "../x"):          false,
		other:                                false,
		filepath.Join(root, "link", "f.csv"): false,
		"/etc/passwd":                        false,
	} {
		err := p.CheckPath("source", path)
		if (err == nil) != ok {
			t.Errorf("%s: %v", path, err)
		}
		if err != nil && (nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "--allow-paths")) {
			t.Errorf("%s: %v", path, err)
		}
	}
	if err := (Policy{}).CheckPath("dir", "/etc"); err != nil {
		t.Errorf("no roots: %v", err)
	}
}
