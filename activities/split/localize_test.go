package split_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/split/splittest"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
)

// TestLocalizeNPY: a split's eval dataset localized as npy holds its rows
// with the split's schema.
func TestLocalizeNPY(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	uri := splittest.Write(t, st, "npy", 40, 10)
	sd, err := split.Open(context.Background(), st, uri)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := sd.Localize(context.Background(), st, split.EvalDataset, dir, split.FormatNPY); err != nil {
		t.Fatal(err)
	}
	var s dataset.NPYSchema
	b, err := os.ReadFile(filepath.Join(dir, dataset.NPYSchemaFile))
	if err != nil || json.Unmarshal(b, &s) != nil {
		t.Fatalf("schema.json: %s %v", b, err)
	}
	if s.Rows != 10 || !slices.Equal(s.Dense, []string{"x"}) || !slices.Equal(s.Sparse, []string{"user_id"}) {
		t.Errorf("schema %+v", s)
	}
	if err := sd.Localize(context.Background(), st, split.EvalDataset, t.TempDir(), "csv"); err == nil || !strings.Contains(err.Error(), `data_format "csv"`) {
		t.Errorf("csv: %v", err)
	}
}
