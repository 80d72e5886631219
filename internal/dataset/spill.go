package dataset

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/retrain-ml/retrain/internal/trainer"
)

// DefaultChunkRows is how many examples a [SpillSource] holds in memory at
// once (about 230 bytes each with the demo's ten features: ~120 MiB), and
// so the largest training set it shuffles exactly as [trainer.MemorySource]
// does.
const DefaultChunkRows = 1 << 19

// SpillConfig configures a [Spill].
type SpillConfig struct {
	Dense, Sparse []string // the model's features, as for [Data.Examples]
	// Rows is the number of rows that will be added (the split's count); it
	// fixes the number of chunks. A different actual count only makes
	// chunks larger or smaller.
	Rows int64
	// ChunkRows bounds the rows of one chunk (default DefaultChunkRows).
	ChunkRows int
	// Dir is where the chunk files go (default os.TempDir()). They are
	// unlinked as soon as they are created, so that their space is freed
	// when the process ends however it ends (a killed worker leaves
	// nothing behind).
	Dir string
}

// Spill partitions a dataset streamed in batches into chunk files on local
// disk, so that training reads it chunk by chunk in bounded memory. A row
// goes to the chunk its request id hashes to (or, without ids, to the
// chunk of its position), so which rows share a chunk depends on the data
// alone, not on the order the split's files were read in; within a chunk
// rows are put back into request id order when loaded, as [Load] does.
type Spill struct {
	cfg    SpillConfig
	files  []*os.File // unlinked
	ws     []*bufio.Writer
	rows   []int
	bytes  []int64
	added  int64
	perRow int64 // rows per chunk without request ids
	buf    []byte
	err    error
}

// NewSpill creates the chunk files of a spill under cfg.Dir. Close the
// spill, or the source Source returns, to free them.
func NewSpill(cfg SpillConfig) (*Spill, error) {
	if cfg.ChunkRows <= 0 {
		cfg.ChunkRows = DefaultChunkRows
	}
	k := max(1, int((cfg.Rows+int64(cfg.ChunkRows)-1)/int64(cfg.ChunkRows)))
	s := &Spill{cfg: cfg, rows: make([]int, k), bytes: make([]int64, k), perRow: max(1, (cfg.Rows+int64(k)-1)/int64(k))}
	for range k {
		f, err := os.CreateTemp(cfg.Dir, "retrain-spill-*")
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("dataset: spill: %w", err)
		}
		os.Remove(f.Name())
		s.files = append(s.files, f)
		s.ws = append(s.ws, bufio.NewWriterSize(f, 64<<10))
	}
	return s, nil
}

// Close frees the spill's files.
func (s *Spill) Close() error {
	var err error
	for _, f := range s.files {
		err = errors.Join(err, f.Close())
	}
	s.files = nil
	return err
}

// chunkOf is the chunk of a row: a hash of its request id, so that a chunk
// is a random sample of the rows.
func (s *Spill) chunkOf(id int64, hasID bool) int {
	k := uint64(len(s.ws))
	if !hasID {
		return int(min(uint64(s.added/s.perRow), k-1))
	}
	h := uint64(id) + 0x9e3779b97f4a7c15
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	h ^= h >> 31
	hi, _ := bits.Mul64(h, k)
	return int(hi)
}

// Add appends the rows of a batch.
func (s *Spill) Add(d *Data) error {
	if s.err != nil {
		return s.err
	}
	exs, err := d.Examples(s.cfg.Dense, s.cfg.Sparse)
	if err != nil {
		return err
	}
	for i, ex := range exs {
		var id int64
		if d.RequestID != nil {
			id = d.RequestID[i]
		}
		c := s.chunkOf(id, d.RequestID != nil)
		s.buf = encodeExample(s.buf[:0], id, ex, len(s.cfg.Sparse))
		if _, err := s.ws[c].Write(s.buf); err != nil {
			s.err = fmt.Errorf("dataset: spill: %w", err)
			return s.err
		}
		s.rows[c]++
		s.bytes[c] += int64(len(s.buf))
		s.added++
	}
	return nil
}

// encodeExample appends one row: request id, label, the dense values, and
// per sparse feature a count and the ids. ns pads Sparse, which may leave
// trailing missing features out.
func encodeExample(b []byte, id int64, ex trainer.Example, ns int) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(id))
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(ex.Label))
	for _, x := range ex.Dense {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	for f := range ns {
		var ids []uint64
		if f < len(ex.Sparse) {
			ids = ex.Sparse[f]
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(ids)))
		for _, x := range ids {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
	}
	return b
}

// Source finishes the spill and returns a source over it that yields the
// rows for the given number of epochs (0: without end). The source owns the
// spill's files from then on: close it, not the spill.
func (s *Spill) Source(seed uint64, epochs int64, hasRequestID bool) (*SpillSource, error) {
	if s.err != nil {
		s.Close()
		return nil, s.err
	}
	for _, w := range s.ws {
		if err := w.Flush(); err != nil {
			s.Close()
			return nil, fmt.Errorf("dataset: spill: %w", err)
		}
	}
	s.ws = nil
	src := &SpillSource{spill: s, seed: seed, epochs: epochs, sortByID: hasRequestID, orderEpoch: -1, loaded: -1}
	for _, n := range s.rows {
		src.total += int64(n)
	}
	return src, nil
}

// SpillSource is a [trainer.Source] over a [Spill]: each epoch visits the
// chunks in an order drawn from the seed and the epoch, and each chunk's
// rows, in request id order, as [trainer.MemorySource] would shuffle them
// with the chunk's own seed. Only one chunk is in memory at a time (two
// while a batch straddles chunks). With one chunk (a dataset of at most
// ChunkRows rows) the order is exactly that of a MemorySource over all the
// rows in request id order with the same seed, so small datasets train as
// they did before the spill existed.
type SpillSource struct {
	spill    *Spill
	seed     uint64
	epochs   int64
	sortByID bool
	total    int64
	pos      trainer.Position

	order      []int // chunk order of epoch orderEpoch
	orderEpoch int64
	at         int   // index into order of the chunk pos is in
	base       int64 // offset of order[at]'s first row in the epoch
	loaded     int   // chunk mem holds; -1 none
	mem        *trainer.MemorySource
	memEpoch   int64
}

// Rows returns the number of rows in the source.
func (s *SpillSource) Rows() int64 { return s.total }

// Chunks returns the number of chunks.
func (s *SpillSource) Chunks() int { return len(s.spill.rows) }

// Close frees the spill's files.
func (s *SpillSource) Close() error { return s.spill.Close() }

// Position implements [trainer.Source].
func (s *SpillSource) Position() trainer.Position { return s.pos }

// Seek implements [trainer.Source].
func (s *SpillSource) Seek(ctx context.Context, pos trainer.Position) error {
	if pos.Epoch < 0 || pos.Offset < 0 || pos.Offset >= max(s.total, 1) {
		return fmt.Errorf("dataset: seek to %+v: out of range for %d examples", pos, s.total)
	}
	s.pos = pos
	s.locate()
	return nil
}

// locate sets order, at and base for s.pos.
func (s *SpillSource) locate() {
	if s.orderEpoch != s.pos.Epoch {
		s.order = chunkOrder(len(s.spill.rows), s.seed, s.pos.Epoch)
		s.orderEpoch = s.pos.Epoch
	}
	s.at, s.base = 0, 0
	for s.at < len(s.order)-1 && s.base+int64(s.spill.rows[s.order[s.at]]) <= s.pos.Offset {
		s.base += int64(s.spill.rows[s.order[s.at]])
		s.at++
	}
}

// chunkOrder is the order the chunks are visited in an epoch: a
// Fisher-Yates shuffle of its own PCG stream, as MemorySource's.
func chunkOrder(k int, seed uint64, epoch int64) []int {
	order := make([]int, k)
	for i := range order {
		order[i] = i
	}
	r := rand.NewPCG(seed^0x6a09e667f3bcc909, uint64(epoch))
	for i := k - 1; i > 0; i-- {
		j, _ := bits.Mul64(r.Uint64(), uint64(i+1))
		order[i], order[j] = order[j], order[i]
	}
	return order
}

// chunkSeed is the shuffle seed of chunk c: the source's own for chunk 0,
// so that a single chunk shuffles as a MemorySource with that seed.
func chunkSeed(seed uint64, c int) uint64 {
	if c == 0 {
		return seed
	}
	return seed ^ (uint64(c) * 0x9e3779b97f4a7c15)
}

// Next implements [trainer.Source].
func (s *SpillSource) Next(ctx context.Context, dst []trainer.Example) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if s.total == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(dst) {
		if s.epochs > 0 && s.pos.Epoch >= s.epochs {
			return n, io.EOF
		}
		if s.orderEpoch != s.pos.Epoch {
			s.locate()
		}
		c := s.order[s.at]
		size := int64(s.spill.rows[c])
		if size == 0 {
			s.advance(size)
			continue
		}
		if err := s.load(ctx, c); err != nil {
			return n, err
		}
		want := min(int64(len(dst)-n), size-(s.pos.Offset-s.base))
		k, err := s.mem.Next(ctx, dst[n:n+int(want)])
		if err != nil && !errors.Is(err, io.EOF) {
			return n, err
		}
		n += k
		s.pos.Offset += int64(k)
		if s.pos.Offset-s.base == size {
			s.advance(size)
		}
	}
	return n, nil
}

// advance moves past the current chunk, of size rows, into the next one
// or the next epoch.
func (s *SpillSource) advance(size int64) {
	s.base += size
	s.at++
	if s.at == len(s.order) {
		s.pos = trainer.Position{Epoch: s.pos.Epoch + 1}
		s.locate()
	}
}

// load makes mem the source of chunk c at the current position.
func (s *SpillSource) load(ctx context.Context, c int) error {
	if s.loaded != c {
		exs, err := s.readChunk(c)
		if err != nil {
			return err
		}
		// epochs 0: the chunk's MemorySource is told which epoch to shuffle
		// for by Seek, and never ends on its own.
		s.mem = trainer.NewMemorySource(exs, chunkSeed(s.seed, c), 0)
		s.loaded, s.memEpoch = c, -1
	}
	off := s.pos.Offset - s.base
	if s.memEpoch != s.pos.Epoch || s.mem.Position().Offset != off {
		if err := s.mem.Seek(ctx, trainer.Position{Epoch: s.pos.Epoch, Offset: off}); err != nil {
			return err
		}
		s.memEpoch = s.pos.Epoch
	}
	return nil
}

// readChunk reads chunk c's rows back, in request id order (stable, as
// Load sorts).
func (s *SpillSource) readChunk(c int) ([]trainer.Example, error) {
	raw := make([]byte, s.spill.bytes[c])
	if _, err := s.spill.files[c].ReadAt(raw, 0); err != nil {
		return nil, fmt.Errorf("dataset: read spilled chunk %d: %w", c, err)
	}
	n, nd, ns := s.spill.rows[c], len(s.spill.cfg.Dense), len(s.spill.cfg.Sparse)
	ids := make([]int64, n)
	exs := make([]trainer.Example, n)
	dense := make([]float32, n*nd)
	sparse := make([][]uint64, n*ns)
	// Count the ids first so that they all live in one allocation.
	var nids int
	for p, i := 0, 0; i < n; i++ {
		p += 12 + 4*nd
		for range ns {
			if p+4 > len(raw) {
				return nil, fmt.Errorf("dataset: spilled chunk %d is truncated", c)
			}
			k := int(binary.LittleEndian.Uint32(raw[p:]))
			nids += k
			p += 4 + 8*k
		}
	}
	flat := make([]uint64, nids)
	p := 0
	for i := range n {
		ids[i] = int64(binary.LittleEndian.Uint64(raw[p:]))
		ex := &exs[i]
		ex.Label = math.Float32frombits(binary.LittleEndian.Uint32(raw[p+8:]))
		p += 12
		ex.Dense = dense[i*nd : (i+1)*nd : (i+1)*nd]
		for j := range ex.Dense {
			ex.Dense[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[p:]))
			p += 4
		}
		ex.Sparse = sparse[i*ns : (i+1)*ns : (i+1)*ns]
		for f := range ns {
			k := int(binary.LittleEndian.Uint32(raw[p:]))
			p += 4
			if k == 0 {
				continue
			}
			v := flat[:k:k]
			flat = flat[k:]
			for j := range v {
				v[j] = binary.LittleEndian.Uint64(raw[p:])
				p += 8
			}
			ex.Sparse[f] = v
		}
	}
	if p != len(raw) {
		return nil, fmt.Errorf("dataset: spilled chunk %d holds %d bytes past its %d rows", c, len(raw)-p, n)
	}
	if s.sortByID {
		perm := make([]int, n)
		for i := range perm {
			perm[i] = i
		}
		slices.SortStableFunc(perm, func(a, b int) int { return cmp.Compare(ids[a], ids[b]) })
		exs = permute(exs, perm)
	}
	return exs, nil
}

// HasFeatures fails, naming them, when a model's dense or sparse features
// are not columns of that kind in the split: what [Data.Examples] would
// refuse, checked before any row is read.
func (s Schema) HasFeatures(dense, sparse []string) error {
	var missing []string
	for _, name := range dense {
		if !slices.Contains(s.Dense(), name) {
			missing = append(missing, name)
		}
	}
	for _, name := range sparse {
		if !slices.Contains(s.Sparse(), name) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the data has no feature %v", missing)
	}
	return nil
}
