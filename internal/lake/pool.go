package lake

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// PoolAllocator is an Arrow allocator that keeps freed buffers for reuse,
// by power-of-two size class. A job that reads, joins and writes batch
// after batch of the same shape allocates the same buffers over and over;
// with Go's allocator each is new garbage (allocation, zeroing, and the
// collector's work, about 40% of a promotion's CPU), with this one the
// buffers of one batch serve the next once it is released. It is safe for
// concurrent use, and meant to live as long as one job: buffers handed
// out and never freed stay referenced by the pool until the pool itself
// is dropped, so a missed Release costs reuse, and memory only until the
// job ends.
type PoolAllocator struct {
	classes [poolClasses]sync.Pool
	mu      sync.Mutex
	// out maps each buffer handed out to the whole class-sized buffer
	// behind it: Arrow expects cap == len from Allocate (its builders
	// size by cap), so the class's spare capacity is hidden from the
	// caller and found again here on Free.
	out map[*byte][]byte
}

const (
	poolMinShift = 12 // 4 KiB: smaller buffers are cheap to allocate, and not kept
	poolClasses  = 16 // up to 128 MiB; larger ones are not kept
	alignment    = 64 // as memory.GoAllocator
)

// NewPoolAllocator returns an empty pool.
func NewPoolAllocator() *PoolAllocator { return &PoolAllocator{out: map[*byte][]byte{}} }

var _ memory.Allocator = (*PoolAllocator)(nil)

// class is the size class that holds a buffer of size bytes, or -1 when
// buffers that size are not pooled.
func class(size int) int {
	if size < 1<<poolMinShift {
		return -1
	}
	c := bits.Len(uint(size-1)) - poolMinShift
	if c >= poolClasses {
		return -1
	}
	return c
}

// Allocate returns size zeroed bytes, 64-byte aligned, with cap == len.
func (p *PoolAllocator) Allocate(size int) []byte {
	c := class(size)
	if c < 0 {
		return alignedMake(size)
	}
	var full []byte
	if v := p.classes[c].Get(); v != nil {
		full = *(v.(*[]byte))
		clear(full[:size])
	} else {
		full = alignedMake(1 << (c + poolMinShift))
	}
	b := full[:size:size]
	p.mu.Lock()
	p.out[unsafe.SliceData(b)] = full
	p.mu.Unlock()
	return b
}

// alignedMake allocates size zeroed bytes, 64-byte aligned.
func alignedMake(size int) []byte {
	buf := make([]byte, size+alignment)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % alignment); r != 0 {
		off = alignment - r
	}
	return buf[off : off+size : off+size]
}

// Reallocate grows or shrinks b to size bytes, keeping its contents; as
// memory.GoAllocator, bytes past b's length are zero.
func (p *PoolAllocator) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	nb := p.Allocate(size)
	copy(nb, b)
	p.Free(b)
	return nb
}

// Free returns b to its size class. b must not be used afterwards.
// Buffers the pool did not hand out are left to the collector.
func (p *PoolAllocator) Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	ptr := unsafe.SliceData(b)
	p.mu.Lock()
	full, ok := p.out[ptr]
	delete(p.out, ptr)
	p.mu.Unlock()
	if !ok {
		return
	}
	c := class(cap(full))
	p.classes[c].Put(&full)
}
