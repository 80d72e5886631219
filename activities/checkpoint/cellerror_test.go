package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/errtype"
)

// TestCheckpointBadCellNotQuoted: a CSV value of the wrong type,
// from a file or a command's output, fails the node naming the line and
// the column, never the value (which may be anything a param or a step
// put there, a secret included): the message goes to the run's history
// and report.
func TestCheckpointBadCellNotQuoted(t *testing.T) {
	t.Parallel()
	c, _, _ := newCheckpoints(t)
	const planted = "planted-Value-7f3e"
	src := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(src, []byte("id,score\n1,0.5\n2,"+planted+"\n"), 0o644)
	for name, with := range map[string]map[string]any{
		"file": {"source": src, "columns": map[string]any{"id": "int64", "score": "double"}},
		"command": {"command": []any{"printf", "id,score\\n1,0.5\\n2,%s\\n", planted},
			"columns": map[string]any{"id": "int64", "score": "double"}},
	} {
		_, err := run(t.Context(), c, checkpointInput("run-cell", with))
		if nodetest.ErrType(err) != errtype.BadInput {
			t.Fatalf("%s: %v, want a %s error", name, err, errtype.BadInput)
		}
		if msg := err.Error(); strings.Contains(msg, "planted") || strings.Contains(msg, "7f3e") ||
			!strings.Contains(msg, `line 3, column "score": the value is not a double`) {
			t.Errorf("%s: %q: want line 3 and column \"score\", not the value", name, msg)
		}
	}
}
