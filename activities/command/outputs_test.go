package command

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/errtype"
)

// script runs sh -c src as a command node.
func script(t *testing.T, src string, extra ...any) (map[string]any, error) {
	t.Helper()
	with := map[string]any{"argv": []any{"sh", "-c", src}}
	for i := 0; i+1 < len(extra); i += 2 {
		with[extra[i].(string)] = extra[i+1]
	}
	return run(t, with)
}

// TestOutputsFile: the keys of the object the program writes to
// $RETRAIN_OUTPUTS are outputs next to the fixed three.
func TestOutputsFile(t *testing.T) {
	out, err := script(t, `echo scored; printf '{"auc": 0.71, "model_uri": "s3://models/m1", "n": 3, "tags": ["a"], "meta": {"k": null}, "ok": true}' > "$RETRAIN_OUTPUTS"`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"auc": 0.71, "model_uri": "s3://models/m1", "n": float64(3), "ok": true,
		"exit_code": float64(0), "stdout": "scored", "stderr": "",
	}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("output %s = %#v, want %#v", k, out[k], v)
		}
	}
	if tags, _ := out["tags"].([]any); len(tags) != 1 || tags[0] != "a" {
		t.Errorf("tags %#v", out["tags"])
	}
	if meta, _ := out["meta"].(map[string]any); len(meta) != 1 {
		t.Errorf("meta %#v", out["meta"])
	}
	if len(out) != 9 {
		t.Errorf("outputs %v", out)
	}

	// A success by ok_exit_codes reads the file too.
	out, err = script(t, `echo '{"x": 1}' > "$RETRAIN_OUTPUTS"; exit 3`, "ok_exit_codes", []any{3})
	if err != nil || out["x"] != float64(1) || out["exit_code"] != float64(3) {
		t.Errorf("exit 3 in ok_exit_codes: %v, %v", out, err)
	}
}

// TestOutputsNone: no file, an empty one, or only whitespace: the three
// fixed outputs, as before the file existed.
func TestOutputsNone(t *testing.T) {
	for _, src := range []string{"true", `: > "$RETRAIN_OUTPUTS"`, `printf ' \n\t\n' > "$RETRAIN_OUTPUTS"`} {
		out, err := script(t, src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if len(out) != 3 || out["exit_code"] != float64(0) {
			t.Errorf("%s: outputs %v", src, out)
		}
	}
}

// TestOutputsFolder: each attempt gets a fresh folder, removed after it; the
// node's variable wins over an env entry of the same name.
func TestOutputsFolder(t *testing.T) {
	src := `echo "$RETRAIN_OUTPUTS"; test ! -e "$RETRAIN_OUTPUTS" && test -d "$(dirname "$RETRAIN_OUTPUTS")"`
	first, err := script(t, src, "env", map[string]any{OutputsEnv: "/tmp/mine.json"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := script(t, src)
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := first["stdout"].(string), second["stdout"].(string)
	if p1 == "/tmp/mine.json" || !filepath.IsAbs(p1) || p1 == p2 {
		t.Errorf("paths %q, %q", p1, p2)
	}
	for _, p := range []string{p1, p2} {
		if _, err := os.Stat(filepath.Dir(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("folder of %s left behind: %v", p, err)
		}
	}
	// A failed attempt's file is not read, and its folder goes too.
	out, err := script(t, `echo "$RETRAIN_OUTPUTS" >&2; echo '[' > "$RETRAIN_OUTPUTS"; exit 1`)
	if err == nil || nodetest.ErrType(err) == errtype.BadOutput || !strings.Contains(err.Error(), "exited with code 1") {
		t.Errorf("failed command: %v, %v", out, err)
	}
}

// TestOutputsErrors: a file the node cannot use fails it without retry,
// naming the node and saying what is wrong.
func TestOutputsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"too large", `yes aaaaaaa | head -c 70000 > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) is 70000 bytes; the cap is 65536 bytes (64 KiB), as outputs are recorded in the run's history: write a large result to a file or the object store and output its path`},
		{"not JSON", `printf '{\n  "auc": 0.7,\n}' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) is not JSON: line 3, column 1: invalid character '}' looking for beginning of object key string`},
		{"not JSON, first line", `echo 'auc=0.7' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) is not JSON: line 1, column 1: invalid character 'a' looking for beginning of value`},
		{"two values", `echo '{"a": 1} {"b": 2}' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) is not JSON: line 1, column 10: invalid character '{' after top-level value`},
		{"cut short", `printf '{"a": ' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) is not JSON: line 1, column 6: unexpected end of JSON input`},
		{"a list", `echo '[1, 2]' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) holds a list ([1,2]), want a JSON object such as {"auc": 0.71}`},
		{"a string", `echo '"done"' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) holds a string ("done"), want a JSON object such as {"auc": 0.71}`},
		{"a number", `echo '0.71' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) holds a number (0.71), want a JSON object such as {"auc": 0.71}`},
		{"null", `echo 'null' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) holds null, want a JSON object such as {"auc": 0.71}`},
		{"a fixed key", `echo '{"auc": 1, "stdout": "x"}' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) sets "stdout", an output the command node gives itself (exit_code, stdout, stderr); use another key`},
		{"a key no reference can name", `echo '{"a.b": 1}' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) has key "a.b", which is not a valid output name: use letters, digits, '_' and '-', starting with a letter or '_' (the KEY of ${nodes.ID.outputs.KEY})`},
		{"every bad key", `echo '{"exit_code": 0, "1st": 1, "": 2}' > "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) has key "", which is not a valid output name: use letters, digits, '_' and '-', starting with a letter or '_' (the KEY of ${nodes.ID.outputs.KEY}); has key "1st", which is not a valid output name: use letters, digits, '_' and '-', starting with a letter or '_' (the KEY of ${nodes.ID.outputs.KEY}); sets "exit_code", an output the command node gives itself (exit_code, stdout, stderr); use another key`},
		{"a folder", `mkdir "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) is a folder, not a file`},
		{"a named pipe, which is not opened", `mkfifo -m 600 "$RETRAIN_OUTPUTS"`,
			`the outputs file ($RETRAIN_OUTPUTS) is not a regular file (mode prw-------)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := script(t, tc.src)
			if err == nil {
				t.Fatalf("outputs %v, want an error", out)
			}
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != errtype.BadOutput || !appErr.NonRetryable() {
				t.Errorf("error %v: want a non-retryable %s", err, errtype.BadOutput)
			}
			if appErr != nil && appErr.Message() != tc.want {
				t.Errorf("message\n%s\nwant\n%s", appErr.Message(), tc.want)
			}
		})
	}
}

// TestOutputsFileAtTheCap: exactly MaxOutputsFile bytes is allowed.
func TestOutputsFileAtTheCap(t *testing.T) {
	// {"k":"aaa...a"} padded to the cap exactly.
	src := `n=$((65536 - 8)); { printf '{"k":"'; head -c $n /dev/zero | tr '\0' a; printf '"}'; } > "$RETRAIN_OUTPUTS"; wc -c < "$RETRAIN_OUTPUTS"`
	out, err := script(t, src)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out["stdout"].(string)) != "65536" || len(out["k"].(string)) != 65536-8 {
		t.Errorf("stdout %v, k of %d bytes", out["stdout"], len(out["k"].(string)))
	}
}

func TestCheckOutputsEnv(t *testing.T) {
	err := check(map[string]any{"argv": []any{"true"}, "env": map[string]any{OutputsEnv: "x"}})
	if err == nil || err.Error() != "env sets RETRAIN_OUTPUTS, which the node sets itself to the path of the command's outputs file" {
		t.Errorf("check: %v", err)
	}
}
