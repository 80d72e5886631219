package dataset

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/retrain-ml/retrain/internal/trainer"
)

var spillSchema = Schema{Label: "label", Date: "date", RequestID: "request_id", Columns: []Column{
	{Name: "x", Kind: Dense}, {Name: "user", Kind: ID}, {Name: "recent", Kind: IDList},
}}

// spillRows are n rows as parquet-go reads a split, request ids shuffled
// so that file order is not id order; x is the request id, so a yielded
// example names its row.
func spillRows(n int) []any {
	ids := rand.New(rand.NewPCG(7, 7)).Perm(n)
	rows := make([]any, n)
	for i, id := range ids {
		m := map[string]any{"request_id": int64(id), "date": int32(100 + id%3), "label": float32(id % 2), "x": float64(id)}
		if id%5 != 0 {
			m["user"] = int64(id % 17)
		}
		m["recent"] = []int64{int64(id % 11), int64(id % 13)}[:id%3]
		rows[i] = m
	}
	return rows
}

// spill writes rows in batches of batch rows and returns the source.
func spill(t *testing.T, rows []any, batch, chunkRows int, epochs int64) *SpillSource {
	t.Helper()
	dir := t.TempDir()
	sp, err := NewSpill(SpillConfig{Dense: []string{"x"}, Sparse: []string{"user", "recent"}, Rows: int64(len(rows)), ChunkRows: chunkRows, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(rows); i += batch {
		d, err := LoadBatch(spillSchema, rows[i:min(i+batch, len(rows))])
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	src, err := sp.Source(3, epochs, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	// The chunk files are unlinked from the start: a killed process
	// leaves nothing in dir.
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		t.Fatalf("the spill left %d entries in its folder (%v)", len(entries), err)
	}
	return src
}

// drain reads src to its end in batches of batch and returns each example
// as its row's id, with the examples themselves.
func drain(t *testing.T, src trainer.Source, batch int) ([]int, []trainer.Example) {
	t.Helper()
	var ids []int
	var exs []trainer.Example
	buf := make([]trainer.Example, batch)
	for {
		n, err := src.Next(context.Background(), buf)
		for _, ex := range buf[:n] {
			ids = append(ids, int(ex.Dense[0]))
			exs = append(exs, trainer.Example{Dense: slices.Clone(ex.Dense), Sparse: slices.Clone(ex.Sparse), Label: ex.Label})
		}
		if errors.Is(err, io.EOF) {
			return ids, exs
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A split that fits one chunk trains in exactly the order it did when the
// whole split was loaded: a MemorySource over Load's rows with the seed.
func TestSpillOneChunkIsTheInMemoryOrder(t *testing.T) {
	rows := spillRows(1000)
	d, err := Load(spillSchema, rows)
	if err != nil {
		t.Fatal(err)
	}
	exs, err := d.Examples([]string{"x"}, []string{"user", "recent"})
	if err != nil {
		t.Fatal(err)
	}
	wantIDs, wantExs := drain(t, trainer.NewMemorySource(exs, 3, 3), 100)
	src := spill(t, rows, 64, 1000, 3)
	if src.Chunks() != 1 {
		t.Fatalf("%d chunks, want 1", src.Chunks())
	}
	gotIDs, gotExs := drain(t, src, 100)
	if !slices.Equal(gotIDs, wantIDs) {
		t.Fatalf("spilled order differs from the in-memory one: first %v, want %v", gotIDs[:10], wantIDs[:10])
	}
	for i := range gotExs {
		g, w := gotExs[i], wantExs[i]
		if g.Label != w.Label || len(g.Sparse) != len(w.Sparse) {
			t.Fatalf("example %d: %+v, want %+v", i, g, w)
		}
		for f := range g.Sparse {
			if !slices.Equal(g.Sparse[f], w.Sparse[f]) {
				t.Fatalf("example %d feature %d: ids %v, want %v", i, f, g.Sparse[f], w.Sparse[f])
			}
		}
	}
}

// With many chunks, every epoch yields every row once, in an order that
// does not depend on how the rows were batched or ordered on the way in,
// and that differs between epochs.
func TestSpillChunksCoverEveryRowEachEpoch(t *testing.T) {
	rows := spillRows(5000)
	src := spill(t, rows, 300, 700, 2)
	if src.Chunks() != 8 {
		t.Fatalf("%d chunks, want 8", src.Chunks())
	}
	ids, _ := drain(t, src, 128)
	if len(ids) != 10000 {
		t.Fatalf("%d examples over 2 epochs, want 10000", len(ids))
	}
	for e := range 2 {
		epoch := slices.Clone(ids[e*5000 : (e+1)*5000])
		slices.Sort(epoch)
		for i, id := range epoch {
			if id != i {
				t.Fatalf("epoch %d: row %d missing or repeated (sorted position %d holds %d)", e, i, i, id)
			}
		}
	}
	if slices.Equal(ids[:5000], ids[5000:]) {
		t.Fatal("both epochs in the same order")
	}
	reordered := slices.Clone(rows)
	slices.Reverse(reordered)
	again, _ := drain(t, spill(t, reordered, 999, 700, 2), 77)
	if !slices.Equal(again, ids) {
		t.Fatal("the order depends on the order rows were added in")
	}
}

// A source sought to a position yields what an uninterrupted one yields
// from there: a resumed training run reads the same examples.
func TestSpillSeekResumes(t *testing.T) {
	rows := spillRows(3000)
	whole, _ := drain(t, spill(t, rows, 500, 400, 2), 100)
	for _, pos := range []trainer.Position{{Epoch: 0, Offset: 1234}, {Epoch: 1, Offset: 0}, {Epoch: 1, Offset: 2999}} {
		src := spill(t, rows, 500, 400, 2)
		if err := src.Seek(context.Background(), pos); err != nil {
			t.Fatal(err)
		}
		rest, _ := drain(t, src, 100)
		from := int(pos.Epoch)*3000 + int(pos.Offset)
		if !slices.Equal(rest, whole[from:]) {
			t.Fatalf("after seeking to %+v: %d examples starting %v, want %d starting %v", pos, len(rest), rest[:min(5, len(rest))], len(whole[from:]), whole[from:from+5])
		}
	}
	if err := spill(t, rows, 500, 400, 2).Seek(context.Background(), trainer.Position{Offset: 3000}); err == nil {
		t.Fatal("seek past the data succeeded")
	}
}
