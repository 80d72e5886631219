package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
)

// TestRowGroupsRecorded: the manifest records each file's row groups, and
// a row group's rows decode from its recorded byte range and the footer
// alone (every other byte of the file zeroed), which is what a reader
// fetching one row group with a ranged read has.
func TestRowGroupsRecorded(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	key := checkpoint.Key{Pipeline: "p", Run: "r", Node: "groups"}
	const rows = 20_000
	out, _, err := checkpoint.Do(t.Context(), st, key, "fp", func(ctx context.Context, w *checkpoint.Writer) (checkpoint.Ref, error) {
		d, err := checkpoint.Create[sample](w, "train", checkpoint.Options{MaxFileRows: 8000, RowGroupBytes: 64 << 10})
		if err != nil {
			return checkpoint.Ref{}, err
		}
		if _, err := d.Write(samples(rows)); err != nil {
			return checkpoint.Ref{}, err
		}
		return d.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := checkpoint.Load(t.Context(), st, key, "fp")
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := m.Dataset(out.Dataset)
	groups, next := 0, int64(0)
	for _, f := range ds.Files {
		if !f.HasRowGroups() {
			t.Fatalf("%s: row groups %+v do not add up to its %d rows", f.Key, f.RowGroups, f.Rows)
		}
		body, _, err := st.GetBytes(t.Context(), f.Key)
		if err != nil {
			t.Fatal(err)
		}
		footer := int64(binary.LittleEndian.Uint32(body[len(body)-8:])) + 8
		for k, g := range f.RowGroups {
			groups++
			sparse := make([]byte, len(body))
			copy(sparse, "PAR1")
			copy(sparse[g.Offset:g.Offset+g.Size], body[g.Offset:g.Offset+g.Size])
			copy(sparse[int64(len(body))-footer:], body[int64(len(body))-footer:])
			pf, err := parquet.OpenFile(bytes.NewReader(sparse), int64(len(sparse)), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
			if err != nil {
				t.Fatal(err)
			}
			rg := pf.RowGroups()[k]
			if rg.NumRows() != g.Rows {
				t.Fatalf("%s group %d: %d rows, manifest says %d", f.Key, k, rg.NumRows(), g.Rows)
			}
			r := parquet.NewGenericRowGroupReader[sample](rg)
			got := make([]sample, g.Rows)
			n, err := r.Read(got)
			if err != nil && !errors.Is(err, io.EOF) || int64(n) != g.Rows {
				t.Fatalf("%s group %d from its range: %d rows, %v", f.Key, k, n, err)
			}
			for i, s := range got {
				if s.ID != next+int64(i) {
					t.Fatalf("%s group %d row %d: id %d, want %d", f.Key, k, i, s.ID, next+int64(i))
				}
			}
			next += g.Rows
		}
	}
	if next != rows || groups <= len(ds.Files) {
		t.Fatalf("%d rows in %d groups of %d files: want %d rows, more groups than files", next, groups, len(ds.Files), rows)
	}
	t.Logf("%d files, %d row groups", len(ds.Files), groups)
}
