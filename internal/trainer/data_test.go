package trainer

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
)

func idsOf(exs []Example) []uint64 {
	var ids []uint64
	for _, ex := range exs {
		ids = append(ids, ex.Sparse[0][0])
	}
	return ids
}

func numbered(n int) []Example {
	exs := make([]Example, n)
	for i := range exs {
		exs[i].Sparse = [][]uint64{{uint64(i)}}
	}
	return exs
}

// read reads batches of size k until n examples or the end.
func read(t *testing.T, src Source, k, n int) []uint64 {
	t.Helper()
	var ids []uint64
	buf := make([]Example, k)
	for len(ids) < n {
		got, err := src.Next(context.Background(), buf)
		ids = append(ids, idsOf(buf[:got])...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if got != k {
			t.Fatalf("short batch of %d without EOF", got)
		}
	}
	return ids
}

func TestMemorySource(t *testing.T) {
	exs := numbered(10)
	ids := read(t, NewMemorySource(exs, 5, 3), 4, 100)
	if len(ids) != 30 {
		t.Fatalf("3 epochs of 10: %d examples", len(ids))
	}
	for e := range 3 {
		epoch := slices.Clone(ids[e*10 : (e+1)*10])
		slices.Sort(epoch)
		if !slices.Equal(epoch, idsOf(exs)) {
			t.Errorf("epoch %d is not a permutation: %v", e, ids[e*10:(e+1)*10])
		}
	}
	if slices.Equal(ids[:10], ids[10:20]) || slices.Equal(ids[:10], idsOf(exs)) {
		t.Errorf("epochs not reshuffled: %v", ids)
	}
	if again := read(t, NewMemorySource(exs, 5, 3), 7, 100); !slices.Equal(again, ids) {
		t.Errorf("same seed, other batch size: %v, want %v", again, ids)
	}
	if other := read(t, NewMemorySource(exs, 6, 3), 4, 100); slices.Equal(other, ids) {
		t.Error("seed 6 shuffles like seed 5")
	}
}

func TestMemorySourceSeek(t *testing.T) {
	exs := numbered(10)
	all := read(t, NewMemorySource(exs, 5, 0), 4, 40)
	src := NewMemorySource(exs, 5, 0)
	read(t, src, 4, 12)
	pos := src.Position()
	if pos != (Position{Epoch: 1, Offset: 2}) {
		t.Fatalf("position after 12 of 10 examples: %+v", pos)
	}
	resumed := NewMemorySource(exs, 5, 0)
	if err := resumed.Seek(context.Background(), pos); err != nil {
		t.Fatal(err)
	}
	if rest := read(t, resumed, 4, 28); !slices.Equal(rest, all[12:]) {
		t.Errorf("after seek: %v, want %v", rest, all[12:])
	}
	if err := resumed.Seek(context.Background(), Position{Offset: 10}); err == nil {
		t.Error("seek past the epoch accepted")
	}
}

func TestHashString(t *testing.T) {
	// FNV-1a test vectors.
	if HashString("") != 0xcbf29ce484222325 || HashString("a") != 0xaf63dc4c8601ec8c {
		t.Errorf("HashString: %x %x", HashString(""), HashString("a"))
	}
}
