package split

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestJoinedSplitLocalizesAsPromoted: what a trainer program reads of a
// split that joined staging tables (RETRAIN_TRAIN_DATA, RETRAIN_EVAL_DATA)
// is what it reads of the split of the promoted table: the npy arrays are
// the same bytes, file for file, and the Parquet files the same rows (the
// checksums of TestSplitJoinMatchesPromotion). A PyTorch trainer written
// for promoted tables trains on a feature experiment's split unchanged.
func TestJoinedSplitLocalizesAsPromoted(t *testing.T) {
	e := newJoinEnv(t)
	ctx := context.Background()
	joined, err := e.run(t, "join", e.base, []any{entry(e.user.Staging, e.user.SnapshotID, nil), entry(e.ad.Staging, e.ad.SnapshotID, nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := e.run(t, "promoted", e.promote(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	localize := func(out map[string]any, ds, format string) string {
		d, err := Open(ctx, e.splits.Store, out["uri"].(string))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := d.Localize(ctx, e.splits.Store, ds, dir, format); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, ds := range []string{TrainDataset, EvalDataset} {
		j, p := localize(joined, ds, FormatNPY), localize(promoted, ds, FormatNPY)
		jf, pf := files(t, j), files(t, p)
		if !slices.Equal(jf, pf) || len(jf) < 4 {
			t.Fatalf("%s npy files: joined %v, promoted %v", ds, jf, pf)
		}
		for _, f := range jf {
			a, _ := os.ReadFile(filepath.Join(j, f))
			b, _ := os.ReadFile(filepath.Join(p, f))
			if !bytes.Equal(a, b) {
				t.Errorf("%s/%s: %d bytes from the joined split, %d from the promoted one, not the same", ds, f, len(a), len(b))
			}
		}
		if n := len(files(t, localize(joined, ds, FormatParquet))); n == 0 {
			t.Errorf("%s: no Parquet files localized from the joined split", ds)
		}
	}
}

// files lists the names of the files in dir, sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}
