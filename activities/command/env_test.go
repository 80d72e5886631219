package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

func runWith(t *testing.T, p progenv.Policy, with map[string]any) (map[string]any, error) {
	t.Helper()
	typ := TypeWith(Deps{Logger: nodetest.Quiet, Env: p})
	return nodetest.Run(t, typ.Run, nodetype.Input{Pipeline: "p", RunID: "r", Node: "n", Type: Name, With: with}, nil)
}

// TestCleanEnvironment: the worker's credentials do not reach a program
// unless the operator passes them on; PATH and HOME do.
func TestCleanEnvironment(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI-worker-key")
	t.Setenv("RETRAIN_SECRET_X", "planted")
	script := `echo "aws=$AWS_SECRET_ACCESS_KEY x=$RETRAIN_SECRET_X home=${HOME:+set} path=${PATH:+set} node=$RETRAIN_NODE"`
	out, err := runWith(t, progenv.Policy{}, map[string]any{"argv": []any{"sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out["stdout"], "aws= x= home=set path=set node=n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	out, err = runWith(t, progenv.Policy{PassEnv: []string{"AWS_*", "RETRAIN_*"}}, map[string]any{"argv": []any{"sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out["stdout"], "aws=wJalrXUtnFEMI-worker-key x= home=set path=set node=n"; got != want {
		t.Errorf("with --pass-env AWS_*: stdout %q, want %q (secrets are never passed as variables)", got, want)
	}
}

// TestSecretReference: ${secret.NAME} in env is resolved on the worker,
// from RETRAIN_SECRET_NAME or the secrets folder, and its value is masked
// in the output tails and in the outputs the program writes.
func TestSecretReference(t *testing.T) {
	const value = "s3cr3t-Value-91f2"
	t.Setenv("RETRAIN_SECRET_TOKEN", value)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "FILE_TOKEN"), []byte("from-file-77\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := progenv.Policy{SecretsDir: dir}
	out, err := runWith(t, p, map[string]any{
		"argv": []any{"sh", "-c", `echo "token=$TOKEN"; echo "auth=$AUTH" >&2; echo "{\"t\": \"$TOKEN\", \"f\": \"$F\"}" > "$RETRAIN_OUTPUTS"; test "$F" = from-file-77`},
		"env":  map[string]any{"TOKEN": "${secret.TOKEN}", "AUTH": "Bearer ${secret.TOKEN}", "F": "${secret.FILE_TOKEN}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(out)
	if strings.Contains(string(b), value) || strings.Contains(string(b), "from-file-77") {
		t.Errorf("a secret's value is in the outputs: %s", b)
	}
	if out["stdout"] != "token=***" || out["stderr"] != "auth=Bearer ***" || out["t"] != "***" {
		t.Errorf("outputs %s", b)
	}

	_, err = runWith(t, p, map[string]any{"argv": []any{"true"}, "env": map[string]any{"K": "${secret.MISSING}"}})
	if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "MISSING") {
		t.Errorf("missing secret: %v", err)
	}
}

// TestSecretInFailure: a failing program's stderr, quoted in the error,
// has the secret masked.
func TestSecretInFailure(t *testing.T) {
	const value = "fail-s3cr3t-4410"
	t.Setenv("RETRAIN_SECRET_K", value)
	_, err := runWith(t, progenv.Policy{}, map[string]any{
		"argv": []any{"sh", "-c", `echo "bad key $K" >&2; exit 3`},
		"env":  map[string]any{"K": "${secret.K}"},
	})
	if err == nil || strings.Contains(err.Error(), value) || !strings.Contains(err.Error(), "bad key ***") {
		t.Errorf("error %v", err)
	}
}
