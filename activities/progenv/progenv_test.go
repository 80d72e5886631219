package progenv

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
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

// resolveCtx interpolates with as a spec's `with` against params and
// returns it with a context carrying where the spec's own secret
// references landed, as the activity wrapper gives a step.
func resolveCtx(t *testing.T, with map[string]any, params map[string]any) (context.Context, map[string]any) {
	t.Helper()
	v, refs, err := dags.InterpolateSecrets(with, dags.Scope{Params: params})
	if err != nil {
		t.Fatal(err)
	}
	return nodetype.WithSecretRefs(context.Background(), refs), v.(map[string]any)
}

func envOf(t *testing.T, v any) map[string]string {
	env := map[string]string{}
	for k, x := range v.(map[string]any) {
		env[k] = x.(string)
	}
	return env
}

func TestResolve(t *testing.T) {
	t.Setenv("RETRAIN_SECRET_A", "alpha")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "B"), []byte("beta\n"), 0o600)
	p := Policy{SecretsDir: dir}
	ctx, with := resolveCtx(t, map[string]any{"env": map[string]any{
		"X": "${secret.A}:${secret.B}", "Y": "plain", "Z": "$${secret.A}",
		"P": "${params.p}", "Q": "${secret.A}/${params.p}/${secret.A}",
	}}, map[string]any{"p": "${secret.B}"})
	e, err := p.Resolve(ctx, "env", envOf(t, with["env"]))
	if err != nil {
		t.Fatal(err)
	}
	// Only what the spec wrote is resolved: the escaped reference and the
	// one that came in a param stay text.
	want := []string{"P=${secret.B}", "Q=alpha/${secret.B}/alpha", "X=alpha:beta", "Y=plain", "Z=${secret.A}"}
	if !slices.Equal(e.Vars, want) || !slices.Equal(e.Secrets, []string{"alpha", "beta"}) {
		t.Errorf("got %+v, want vars %q", e, want)
	}
	// Without the workflow's record, nothing is resolved.
	e, err = p.Resolve(context.Background(), "env", map[string]string{"X": "${secret.A}"})
	if err != nil || !slices.Equal(e.Vars, []string{"X=${secret.A}"}) || len(e.Secrets) > 0 {
		t.Errorf("unrecorded reference: %+v, %v", e, err)
	}
	ctx, with = resolveCtx(t, map[string]any{"env": map[string]any{"X": "${secret.NOPE}"}}, nil)
	_, err = p.Resolve(ctx, "env", envOf(t, with["env"]))
	if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "NOPE") || !strings.Contains(err.Error(), dir) {
		t.Errorf("missing: %v", err)
	}
	// Spans that do not fit the value (a tampered input) resolve nothing.
	bad := nodetype.WithSecretRefs(context.Background(), []dags.SecretRef{{Path: "/env/X", Spans: []dags.SecretSpan{{Name: "A", Start: 3}}}})
	if _, err := p.Resolve(bad, "env", map[string]string{"X": "${secret.A}"}); nodetest.ErrType(err) != errtype.BadInput {
		t.Errorf("misplaced span: %v", err)
	}
	if got := MaskString("a alpha b", []string{"alpha"}); got != "a *** b" {
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

// TestResolveLegacyInput: an input with no record of secret references
// at all (nil, as a worker from before the record sends it) resolves every
// reference as that worker's activities did, so nodes in flight across a
// rolling upgrade keep their secrets; an input with an empty record (what
// every run now sends when its spec wrote none) resolves nothing.
func TestResolveLegacyInput(t *testing.T) {
	t.Setenv("RETRAIN_SECRET_A", "alpha")
	p := Policy{}
	env := map[string]string{"X": "${secret.A}", "Y": "$${secret.A}"}
	legacy := nodetype.WithSecretRefs(context.Background(), nil)
	e, err := p.Resolve(legacy, "env", env)
	if err != nil || !slices.Equal(e.Vars, []string{"X=alpha", "Y=$${secret.A}"}) {
		t.Errorf("legacy input: %+v, %v", e, err)
	}
	none := nodetype.WithSecretRefs(context.Background(), []dags.SecretRef{})
	e, err = p.Resolve(none, "env", env)
	if err != nil || !slices.Equal(e.Vars, []string{"X=${secret.A}", "Y=$${secret.A}"}) {
		t.Errorf("input recording no references: %+v, %v", e, err)
	}
}
