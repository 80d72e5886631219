package lake

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// chunkReader serves the column chunk reads of a Parquet file too large to
// read whole. It parses the footer from the file's tail to know where each
// column chunk lies. A read that misses memory is a chunk the scan needs;
// its column joins the columns this open file has been asked for, and the
// reader then fetches every chunk of those columns in the row group that
// is not in memory yet, merged into ranges across gaps below MergeGapBytes
// and cut at MaxRangeBytes, all at once. arrow-go asks for a row group's
// projected chunks in parallel (pqarrow Parallel, which iceberg-go sets),
// so after the first row group a whole row group's projection arrives in
// a few concurrent GETs instead of one GET per chunk. Why the footer and
// not a read-ahead block cache: a block cache fetches the columns a scan
// does not project as well, up to all of a wide table's bytes; the footer
// says exactly where the wanted chunks are. Fetched ranges are held until
// each of their chunks has been read once (arrow-go reads a chunk once),
// so memory is bounded by what a row group's projection needs.
type chunkReader struct {
	f *s3File

	once    sync.Once
	groups  [][]chunkSpan // by row group, sorted by offset
	metaErr error

	mu      sync.Mutex
	columns map[int]bool   // columns asked for so far
	planned map[int64]bool // chunks (by offset) fetched or being fetched
	blocks  []*block
}

// chunkSpan is one column chunk's bytes.
type chunkSpan struct {
	col      int
	off, end int64
}

// block is one fetched range, and the chunks it holds that are not read.
type block struct {
	off, end int64
	data     []byte
	err      error
	done     chan struct{}
	pending  int
}

// footer parses the file's metadata from its tail.
func (c *chunkReader) footer() error {
	c.once.Do(func() {
		c.columns = map[int]bool{}
		c.planned = map[int64]bool{}
		tail := c.f.tail
		if len(tail) < 8 || string(tail[len(tail)-4:]) != "PAR1" {
			return // not a plain Parquet file: reads go one by one
		}
		n := int64(binary.LittleEndian.Uint32(tail[len(tail)-8:]))
		if n+8 > int64(len(tail)) {
			// Metadata larger than the tail read: fetch it.
			start := c.f.size - 8 - n
			data, _, err := c.f.r.getRange(c.f.ctx, c.f.bucket, c.f.key, fmt.Sprintf("bytes=%d-%d", start, c.f.size-1))
			if err != nil {
				c.metaErr = fmt.Errorf("read Parquet footer: %w", err)
				return
			}
			tail = data
		}
		md, err := metadata.NewFileMetaData(tail[int64(len(tail))-8-n:len(tail)-8], nil)
		if err != nil {
			return // unreadable here: let arrow-go report it
		}
		for i := range md.NumRowGroups() {
			rg := md.RowGroup(i)
			var spans []chunkSpan
			for j := range rg.NumColumns() {
				cc, err := rg.ColumnChunk(j)
				if err != nil {
					spans = nil
					break
				}
				// Where arrow-go's row group reader starts a chunk.
				off := cc.DataPageOffset()
				if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < off {
					off = cc.DictionaryPageOffset()
				}
				spans = append(spans, chunkSpan{col: j, off: off, end: off + cc.TotalCompressedSize()})
			}
			slices.SortFunc(spans, func(a, b chunkSpan) int { return int(a.off - b.off) })
			c.groups = append(c.groups, spans)
		}
	})
	return c.metaErr
}

// readAt fills p with the file's bytes at off.
func (c *chunkReader) readAt(p []byte, off int64) error {
	if err := c.footer(); err != nil {
		return err
	}
	end := off + int64(len(p))
	c.mu.Lock()
	b := c.covering(off, end)
	if b == nil {
		b = c.plan(off, end)
	}
	c.mu.Unlock()
	if b == nil {
		// Not a chunk the footer names (or no footer): fetch just this.
		data, _, err := c.f.r.getRange(c.f.ctx, c.f.bucket, c.f.key, fmt.Sprintf("bytes=%d-%d", off, end-1))
		if err != nil {
			return err
		}
		if len(data) != len(p) {
			return fmt.Errorf("got %d bytes at %d, want %d", len(data), off, len(p))
		}
		copy(p, data)
		return nil
	}
	<-b.done
	if b.err != nil {
		c.release(b)
		return b.err
	}
	copy(p, b.data[off-b.off:end-b.off])
	c.release(b)
	return nil
}

// covering is a block that holds [off, end), nil if none. Under c.mu.
func (c *chunkReader) covering(off, end int64) *block {
	for _, b := range c.blocks {
		if b.off <= off && end <= b.end {
			return b
		}
	}
	return nil
}

// plan starts fetching the chunk at off and the chunks of the columns
// asked for so far in its row group, and returns the block that will
// hold [off, end); nil when off is no chunk's start. Under c.mu.
func (c *chunkReader) plan(off, end int64) *block {
	rg, col := -1, -1
	for i, spans := range c.groups {
		for _, s := range spans {
			if s.off == off {
				rg, col = i, s.col
			}
		}
	}
	if rg < 0 {
		return nil
	}
	c.columns[col] = true
	var want []chunkSpan
	for _, s := range c.groups[rg] {
		if s.off == off {
			s.end = max(s.end, end) // arrow-go may pad a chunk's length
		} else if !c.columns[s.col] || s.off >= c.f.tailOff || c.planned[s.off] {
			// Not asked for, in memory, or fetched before (a chunk read
			// once is not read again; if it is, its own miss fetches it).
			continue
		}
		c.planned[s.off] = true
		want = append(want, s)
	}
	var mine *block
	for _, run := range coalesce(want, c.f.r.cfg.MergeGapBytes, c.f.r.cfg.MaxRangeBytes) {
		b := &block{off: run.off, end: run.end, pending: run.chunks, done: make(chan struct{})}
		c.blocks = append(c.blocks, b)
		if b.off <= off && end <= b.end {
			mine = b
		}
		go c.fetch(b)
	}
	return mine
}

func (c *chunkReader) fetch(b *block) {
	defer close(b.done)
	data, _, err := c.f.r.getRange(c.f.ctx, c.f.bucket, c.f.key, fmt.Sprintf("bytes=%d-%d", b.off, b.end-1))
	if err == nil && int64(len(data)) != b.end-b.off {
		err = fmt.Errorf("got %d bytes at %d, want %d", len(data), b.off, b.end-b.off)
	}
	b.data, b.err = data, err
}

// release counts a chunk of b as read and drops b once all are.
func (c *chunkReader) release(b *block) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b.pending--
	if b.pending > 0 && b.err == nil {
		return
	}
	c.blocks = slices.DeleteFunc(c.blocks, func(x *block) bool { return x == b })
}

func (c *chunkReader) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.blocks = nil
}

// span is a merged range of chunks.
type span struct {
	off, end int64
	chunks   int
}

// coalesce merges chunks (sorted by offset) into ranges: the next chunk
// joins the current range when the gap before it is at most gap bytes and
// the range stays within maxLen (a single chunk larger than maxLen is a
// range of its own).
func coalesce(chunks []chunkSpan, gap, maxLen int64) []span {
	var out []span
	for _, ch := range chunks {
		if n := len(out); n > 0 && ch.off-out[n-1].end <= gap && ch.end-out[n-1].off <= maxLen && ch.off >= out[n-1].end {
			out[n-1].end = ch.end
			out[n-1].chunks++
			continue
		}
		out = append(out, span{off: ch.off, end: ch.end, chunks: 1})
	}
	return out
}
