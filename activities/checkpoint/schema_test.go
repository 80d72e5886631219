package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/errtype"
)

// TestSchema: the field list comes from With, with its defaults and docs,
// and the outputs from Outputs, in the order they were declared before.
func TestSchema(t *testing.T) {
	typ := Type(nil, quiet)
	if err := typ.Validate(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range typ.NodeType.Fields {
		names = append(names, f.Name)
		if f.Doc == "" {
			t.Errorf("field %s has no doc", f.Name)
		}
		if f.Required {
			t.Errorf("field %s is required: command and source are either-or", f.Name)
		}
		if f.Name == "dataset" && f.Default != "data" {
			t.Errorf("dataset default %q, want data", f.Default)
		}
	}
	if want := []string{"command", "source", "format", "columns", "inputs", "dataset", "max_file_rows", "env", "dir"}; !slices.Equal(names, want) {
		t.Errorf("fields %v, want %v", names, want)
	}
	if got, want := typ.NodeType.Outputs, []string{"uri", "manifest", "dataset", "rows", "files", "bytes", "columns", "fingerprint", "reused", "summary"}; !slices.Equal(got, want) {
		t.Errorf("outputs %v, want %v", got, want)
	}
	if CheckpointType.Name != Name || len(CheckpointType.Fields) != len(names) {
		t.Errorf("CheckpointType %+v", CheckpointType)
	}
}

// TestDatasetDefault: without dataset the checkpoint's dataset is "data";
// an empty one is refused at validation and at run time.
func TestDatasetDefault(t *testing.T) {
	t.Parallel()
	c, _, _ := newCheckpoints(t)
	src := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(src, []byte("id\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t.Context(), c, checkpointInput("run-default", map[string]any{"source": src}))
	if err != nil || out.Dataset != "data" || out.Rows != 1 {
		t.Fatalf("outputs %+v, %v", out, err)
	}
	if _, err := run(t.Context(), c, checkpointInput("run-empty", map[string]any{"source": src, "dataset": ""})); nodetest.ErrType(err) != errtype.BadInput {
		t.Errorf("empty dataset: %v, want %s", err, errtype.BadInput)
	}
	if err := check(map[string]any{"source": src, "dataset": ""}); err == nil {
		t.Error("check accepts an empty dataset")
	}
}
