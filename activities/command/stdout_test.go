package command

import (
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
)

// TestOutputsFromStdout: a trainer that prints its result as the last line
// of stdout needs no wrapper; whatever it printed before is only logged.
func TestOutputsFromStdout(t *testing.T) {
	out, err := script(t, `echo "epoch 1 loss 0.5"; echo "epoch 2 loss 0.4"; echo '{"auc": 0.71, "model_uri": "/tmp/m"}'; echo`,
		"outputs_from", "stdout")
	if err != nil {
		t.Fatal(err)
	}
	if out["auc"] != 0.71 || out["model_uri"] != "/tmp/m" || out["exit_code"] != float64(0) || len(out) != 5 {
		t.Fatalf("outputs %v", out)
	}
	// The file is not read then.
	out, err = script(t, `echo '{"a": 1}' > "$RETRAIN_OUTPUTS"; echo '{"b": 2}'`, "outputs_from", "stdout")
	if err != nil || out["b"] != float64(2) || out["a"] != nil {
		t.Fatalf("file and stdout: %v, %v", out, err)
	}
	// Nor is stdout's last line by default.
	out, err = script(t, `echo '{"b": 2}'`)
	if err != nil || out["b"] != nil {
		t.Fatalf("default: %v, %v", out, err)
	}

	long := strings.Repeat("x", 5000)
	for _, tt := range []struct{ src, want string }{
		{`echo '{"auc": 0.7}'; echo done`, `the last line of stdout (outputs_from: stdout) is not JSON`},
		{`true`, `the program printed nothing`},
		{`echo '[1, 2]'`, `holds a list`},
		{`echo '{"stdout": 1}'`, `sets "stdout"`},
		{`printf '{"k": "` + long + `"}'`, `longer than the 4096 bytes of stdout kept`},
	} {
		_, err := script(t, tt.src, "outputs_from", "stdout")
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != errtype.BadOutput || !appErr.NonRetryable() || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.60s: error %v, want a BadOutput about %q", tt.src, err, tt.want)
		}
	}
	if err := check(map[string]any{"argv": []any{"x"}, "outputs_from": "stderr"}); err == nil || !strings.Contains(err.Error(), "outputs_from") {
		t.Errorf("outputs_from stderr: %v", err)
	}
}
