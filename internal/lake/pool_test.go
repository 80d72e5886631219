package lake

import (
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestPoolAllocatorReuses: a freed buffer of a size class serves the next
// allocation of that class, zeroed and aligned; small and huge buffers
// are not kept; Reallocate keeps contents and zeroes what it adds.
func TestPoolAllocatorReuses(t *testing.T) {
	p := NewPoolAllocator()
	aligned := func(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%alignment == 0 }
	a := p.Allocate(5000)
	if len(a) != 5000 || cap(a) != 5000 || !aligned(a) {
		t.Fatalf("Allocate(5000): len %d cap %d aligned %t", len(a), cap(a), aligned(a))
	}
	for i := range a {
		a[i] = 0xff
	}
	p.Free(a)
	b := p.Allocate(6000)
	// sync.Pool may drop an entry (a GC between Put and Get); when it
	// does not, the buffer must be a's, cleared.
	if unsafe.SliceData(b) == unsafe.SliceData(a) {
		for i, v := range b {
			if v != 0 {
				t.Fatalf("reused buffer not zeroed at %d", i)
			}
		}
	} else {
		t.Log("sync.Pool dropped the buffer; reuse not observed")
	}
	if len(b) != 6000 || !aligned(b) {
		t.Errorf("Allocate(6000): len %d aligned %t", len(b), aligned(b))
	}
	copy(b, []byte{1, 2, 3})
	c := p.Reallocate(7000, b)
	if c[0] != 1 || c[2] != 3 || c[3] != 0 || c[6999] != 0 || len(c) != 7000 || cap(c) != 7000 {
		t.Errorf("Reallocate lost or left data: %v len %d cap %d", c[:5], len(c), cap(c))
	}
	d := p.Reallocate(20000, c)
	if d[0] != 1 || d[2] != 3 || d[19999] != 0 || len(d) != 20000 || !aligned(d) {
		t.Errorf("Reallocate to a larger class: %v len %d", d[:5], len(d))
	}
	small := p.Allocate(100)
	if len(small) != 100 || cap(small) != 100 {
		t.Errorf("a small buffer should be exact (not pooled): len %d cap %d", len(small), cap(small))
	}
	p.Free(make([]byte, 8192)) // not the pool's: ignored
	if len(p.out) != 1 {
		t.Errorf("%d buffers out, want 1 (d)", len(p.out))
	}
	if class(1<<30) != -1 || class(100) != -1 || class(4096) != 0 || class(4097) != 1 {
		t.Errorf("size classes: %d %d %d %d", class(1<<30), class(100), class(4096), class(4097))
	}
}

// TestRunColumns: columns whose values repeat in runs (a user's rows) are
// told apart from unordered ones, which keep their dictionary.
func TestRunColumns(t *testing.T) {
	mem := memory.NewGoAllocator()
	var fields []arrow.Field
	var cols []arrow.Array
	for _, kind := range []string{"entity", "feature", "category", "category_feature", "unique", "list"} {
		f, a := kindColumn(mem, kind, 1000)
		defer a.Release()
		fields, cols = append(fields, f), append(cols, a)
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, 1000)
	defer rec.Release()
	got := runColumns(rec)
	want := map[string]bool{"entity": true, "feature": true}
	if len(got) != len(want) || !got["entity"] || !got["feature"] {
		t.Errorf("run columns %v, want %v", got, want)
	}
}
