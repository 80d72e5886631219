package checkpoint_test

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
)

// TestCommitParts: parts written apart commit as one checkpoint whose
// dataset holds every part's rows, in the order of the parts given; a part
// that was redone (its first try left files and a list) is not in it, and
// its files are swept; a second commit of the same checkpoint returns the
// first one's outputs.
func TestCommitParts(t *testing.T) {
	t.Parallel()
	st := s3test.Start(t).Open(t, "ckpt")
	ctx := t.Context()
	key := checkpoint.Key{Pipeline: "p", Run: "r", Node: "split"}
	const inputs = "fp1"
	attempt := checkpoint.NewAttempt()
	rows := samples(300)
	part := func(name string, rows []sample) string {
		t.Helper()
		w, err := checkpoint.NewPart(ctx, st, key, inputs, attempt, name)
		if err != nil {
			t.Fatal(err)
		}
		d, err := checkpoint.Create[sample](w, "train", checkpoint.Options{MaxFileRows: 70})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write(rows); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Close(); err != nil {
			t.Fatal(err)
		}
		k, err := w.ClosePart()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	// The redone part's first try: its files and list are left behind.
	stale := part("g001", rows[100:200])
	parts := []string{part("g000", rows[:100]), part("g001", rows[100:200]), part("g002", rows[200:])}
	if slices.Contains(parts, stale) {
		t.Fatal("a redone part wrote under its first try's name")
	}
	if _, hit, err := checkpoint.Lookup[outputs](ctx, st, key, inputs); err != nil || hit {
		t.Fatalf("lookup before the commit: hit %v, err %v", hit, err)
	}
	out, hit, err := checkpoint.Commit(ctx, st, key, inputs, attempt, parts, outputs{Count: 300})
	if err != nil || hit || out.Count != 300 {
		t.Fatalf("commit: %+v, hit %v, err %v", out, hit, err)
	}
	ref := checkpoint.Ref{Manifest: checkpoint.ManifestKey(key, inputs), Dataset: "train"}
	got, err := checkpoint.ReadAll[sample](ctx, st, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, rows) {
		t.Errorf("read %d rows back, want the parts' %d in their order", len(got), len(rows))
	}
	// Only the manifest and the committed parts' files are left.
	m, err := checkpoint.Load(ctx, st, key, inputs)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{checkpoint.ManifestKey(key, inputs): true}
	ds, _ := m.Dataset("train")
	for _, f := range ds.Files {
		named[f.Key] = true
	}
	bases := map[string]bool{}
	for _, f := range ds.Files {
		bases[path.Base(f.Key)] = true
	}
	if len(bases) != len(ds.Files) {
		t.Errorf("files %v: parts' files share base names; a download side by side would lose some", ds.Files)
	}
	if m.Attempt != attempt || ds.Rows != 300 || len(ds.Files) != 2+2+2 {
		t.Errorf("manifest: attempt %s, %d rows, %d files; want %s, 300, 6", m.Attempt, ds.Rows, len(ds.Files), attempt)
	}
	for _, k := range keysUnder(t, st, "checkpoints/p/r/split/") {
		if !named[k] {
			t.Errorf("%s left after the commit", k)
		}
		if strings.HasPrefix(k, strings.TrimSuffix(stale, "part.json")) {
			t.Errorf("%s of the redone part's first try was committed", k)
		}
	}
	// A commit that comes second gets the first one's outputs.
	out, hit, err = checkpoint.Commit(ctx, st, key, inputs, checkpoint.NewAttempt(), nil, outputs{Count: 1})
	if err != nil || !hit || out.Count != 300 {
		t.Errorf("second commit: %+v, hit %v, err %v; want the first's outputs", out, hit, err)
	}
	if out, hit, err := checkpoint.Lookup[outputs](ctx, st, key, inputs); err != nil || !hit || out.Count != 300 {
		t.Errorf("lookup: %+v, hit %v, err %v", out, hit, err)
	}
}

// TestCommitRefusesMissingPartFiles: a part whose files are gone (swept,
// expired) is not committed.
func TestCommitRefusesMissingPartFiles(t *testing.T) {
	t.Parallel()
	st := s3test.Start(t).Open(t, "ckpt")
	ctx := t.Context()
	key := checkpoint.Key{Pipeline: "p", Run: "r", Node: "split"}
	attempt := checkpoint.NewAttempt()
	w, err := checkpoint.NewPart(ctx, st, key, "fp", attempt, "g000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.WriteAll(w, "train", samples(10)); err != nil {
		t.Fatal(err)
	}
	k, err := w.ClosePart()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range keysUnder(t, st, "checkpoints/p/r/split/") {
		if strings.HasSuffix(f, ".parquet") {
			if err := st.Delete(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := checkpoint.Commit(ctx, st, key, "fp", attempt, []string{k}, outputs{}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("commit of a part whose files are gone: err %v", err)
	}
	if _, err := checkpoint.Load(ctx, st, key, "fp"); err == nil {
		t.Error("a manifest was written")
	}
}
