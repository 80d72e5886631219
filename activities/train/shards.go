package train

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/shard"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// With shard_data, each rank's RETRAIN_TRAIN_DATA holds only its share of
// the split's training rows (internal/shard), and a host reads from the
// store only the row groups its own ranks' shares need, one at a time
// with ranged reads, writing its pieces to the ranks' folders (Parquet,
// or npy once a rank's pieces are all in). A split whose manifest records
// no row groups is read by whole files: each is downloaded, its pieces
// written, and deleted before the next is fetched. What a host wrote survives a failed attempt in its
// shard cache (below the temp folder, per split, host and world size), so
// a retry on the same host reads from the store only the pieces it lacks;
// a successful attempt removes it.

// shardSeed draws the epoch's order of the split's files. It is fixed: the
// assignment must be the same on every host, whichever binary it runs.
const shardSeed = 1

// DataRead is what one host read for its ranks' shares of the training
// data (shard_data), in the node's outputs.
type DataRead struct {
	Ranks      []int `json:"ranks"`       // the ranks whose shares this host holds
	Rows       int64 `json:"rows"`        // their rows
	Shards     int   `json:"shards"`      // the row groups (or whole files) it read from the store
	BytesRead  int64 `json:"bytes_read"`  // what it read from the store for the training data
	SplitBytes int64 `json:"split_bytes"` // the training data's size in the store, for scale
	Reused     int   `json:"reused"`      // pieces an earlier attempt on this host had written
	// DiskPeak is the most bytes the host's local training data held at
	// once (a downloaded file and what was written).
	DiskPeak int64 `json:"disk_peak"`
	// LocalizeSeconds is how long the data took; FirstStepSeconds is from
	// the attempt's start to the host's first progress line.
	LocalizeSeconds  float64 `json:"localize_seconds"`
	FirstStepSeconds float64 `json:"first_step_seconds"`
}

// ShardsInput asks whether a split can be cut into World shares.
type ShardsInput struct {
	Data  string `json:"data"`
	World int    `json:"world"`
}

// GangShards checks, before a gang with shard_data leases anything, that
// its split has a row for each of its ranks; the error names the rows,
// files and ranks.
func (t *Trainers) GangShards(ctx context.Context, in ShardsInput) error {
	if t.Store == nil {
		return objects.NoStore()
	}
	sd, err := split.Open(ctx, t.Store, in.Data)
	if err != nil {
		return err
	}
	_, err = planShards(sd, in.World, nil, "")
	return err
}

// rankShare is one rank's share as the trainer sees it.
type rankShare struct {
	dir   string
	share shard.Share
}

// shardPlan is this host's part of the epoch's assignment.
type shardPlan struct {
	assign shard.Assignment
	ds     checkpoint.Dataset
	units  []shardUnit       // what the assignment's pieces index
	ranks  map[int]rankShare // this host's ranks, by global rank
	root   string            // the host's shard cache for this split and world
}

// shardUnit is a unit of the assignment: one row group of a split file,
// which a host fetches with a ranged read, or a whole file where the
// split's manifest records no row groups (a split written before it did).
type shardUnit struct {
	file  int
	group int // -1: the whole file
	rows  int64
}

// shardUnits are the training data's units: every row group, when every
// file with rows records them; else every file.
func shardUnits(ds checkpoint.Dataset) []shardUnit {
	groups := true
	for _, f := range ds.Files {
		groups = groups && (f.Rows == 0 || f.HasRowGroups())
	}
	var out []shardUnit
	for i, f := range ds.Files {
		if !groups {
			out = append(out, shardUnit{file: i, group: -1, rows: f.Rows})
			continue
		}
		for k, g := range f.RowGroups {
			out = append(out, shardUnit{file: i, group: k, rows: g.Rows})
		}
	}
	return out
}

// env is the share's environment for a rank.
func (p *shardPlan) env(rank int) []string {
	rs, ok := p.ranks[rank]
	if !ok {
		return nil
	}
	return trainer.ShardEnv{
		Data: rs.dir, Index: rank, Count: p.assign.World, Rows: rs.share.Rows,
		MinRows: p.assign.MinRows(), GlobalRows: p.assign.GlobalRows, Epoch: p.assign.Epoch,
	}.Environ()
}

// planShards assigns the split's training rows to the world's ranks and
// picks this host's (ranks are global ranks). It fails before anything is
// read, naming the counts, when there are fewer rows than ranks.
func planShards(sd *split.Data, world int, ranks []int, node string) (*shardPlan, error) {
	ds, _ := sd.Manifest.Dataset(split.TrainDataset)
	units := shardUnits(ds)
	rows := make([]int64, len(units))
	for i, u := range units {
		rows[i] = u.rows
	}
	a, err := shard.Assign(rows, world, shardSeed, 0)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "shard_data: the split's training data has %d rows in %d files, too few for %d ranks: give the node fewer ranks, or train without shard_data", ds.Rows, len(ds.Files), world)
	}
	// One cache per split and node (its retries share it; two nodes on
	// the same split never do), holding one world size's shares.
	sum := sha256.Sum256([]byte(sd.ManifestKey + "\x00" + node))
	root := filepath.Join(shardCacheDir(), hex.EncodeToString(sum[:12]), "w"+strconv.Itoa(world))
	p := &shardPlan{assign: a, ds: ds, units: units, ranks: map[int]rankShare{}, root: root}
	for _, r := range ranks {
		p.ranks[r] = rankShare{dir: filepath.Join(root, "rank-"+strconv.Itoa(r)), share: a.Shares[r]}
	}
	return p, nil
}

// shardCacheDir holds the hosts' shard caches.
func shardCacheDir() string { return filepath.Join(os.TempDir(), "retrain-shards") }

// shardCacheAge is how long a shard cache that no attempt finished is
// kept for a retry: the node's retries come well within it.
const shardCacheAge = 24 * time.Hour

// sweepShardCaches removes the caches no attempt touched for
// shardCacheAge (their node failed for good, or ran elsewhere), so that
// what failed attempts keep for a retry does not pile up on a worker.
func sweepShardCaches(now time.Time) {
	entries, err := os.ReadDir(shardCacheDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		info, err := e.Info()
		if err == nil && now.Sub(info.ModTime()) > shardCacheAge {
			_ = os.RemoveAll(filepath.Join(shardCacheDir(), e.Name()))
		}
	}
}

// localize writes this host's ranks' shares into their folders in format
// (parquet or npy), reading each file of the split it needs once, and
// returns what it read.
func (p *shardPlan) localize(ctx context.Context, store *s3store.Store, schema dataset.Schema, format string) (DataRead, error) {
	started := time.Now()
	var st DataRead
	for _, f := range p.ds.Files {
		st.SplitBytes += f.Size
	}
	sweepShardCaches(started)
	// This node's cache is touched (its age counts from its last attempt).
	if err := os.MkdirAll(p.root, 0o755); err != nil {
		return st, err
	}
	_ = os.Chtimes(filepath.Dir(p.root), started, started)
	// A world size this node trained with before on this host leaves a
	// cache that this one cannot use: only this world's is kept.
	if olds, err := os.ReadDir(filepath.Dir(p.root)); err == nil {
		for _, e := range olds {
			if e.Name() != filepath.Base(p.root) {
				_ = os.RemoveAll(filepath.Join(filepath.Dir(p.root), e.Name()))
			}
		}
	}
	type job struct {
		rank  int
		piece shard.Piece
		out   string
	}
	var (
		order []int // the files to read, in the order the ranks first need them
		jobs  = map[int][]job{}
		npy   = format == split.FormatNPY
	)
	for _, r := range sortedRanks(p.ranks) {
		rs := p.ranks[r]
		st.Ranks = append(st.Ranks, r)
		st.Rows += rs.share.Rows
		if npy && complete(rs.dir) {
			st.Reused += len(rs.share.Pieces)
			continue
		}
		for _, pc := range rs.share.Pieces {
			out := filepath.Join(rs.dir, "pieces", fmt.Sprintf("part-%05d-%d-%d.parquet", pc.Unit, pc.Offset, pc.Rows))
			if !npy {
				out = filepath.Join(rs.dir, fmt.Sprintf("part-%05d-%d-%d.parquet", pc.Unit, pc.Offset, pc.Rows))
			}
			if _, err := os.Stat(out); err == nil {
				st.Reused++
				continue
			}
			if _, ok := jobs[pc.Unit]; !ok {
				order = append(order, pc.Unit)
			}
			jobs[pc.Unit] = append(jobs[pc.Unit], job{rank: r, piece: pc, out: out})
		}
	}
	// This host's own folders: hosts that share a temp folder (workers of
	// one machine) share the node's cache, each rank its own folder.
	incoming := filepath.Join(p.root, fmt.Sprintf("incoming-%d", st.Ranks[0]))
	peak := func() {
		n := dirSize(incoming)
		for _, rs := range p.ranks {
			n += dirSize(rs.dir)
		}
		st.DiskPeak = max(st.DiskPeak, n)
	}
	peak()
	footers := map[int]segment{} // the footers of the files read so far
	for _, u := range order {
		unit := p.units[u]
		f := p.ds.Files[unit.file]
		if unit.group >= 0 {
			// One row group: its bytes and the file's footer, by ranged
			// reads, straight into the ranks' pieces.
			pf, n, err := openGroup(ctx, store, unit.file, f, unit.group, footers)
			st.BytesRead += n
			if err != nil {
				return st, err
			}
			st.Shards++
			for _, j := range jobs[u] {
				if err := writePiece(pf, unit.group, f, j.piece, j.out); err != nil {
					return st, err
				}
			}
			peak()
			continue
		}
		local := filepath.Join(incoming, fmt.Sprintf("file-%05d.parquet", unit.file)) // not the key's name: the manifest is input
		n, err := download(ctx, store, f, local)
		st.BytesRead += n
		if err != nil {
			os.Remove(local)
			return st, err
		}
		st.Shards++
		peak()
		for _, j := range jobs[u] {
			if err := copyRows(local, f, j.piece, j.out); err != nil {
				os.Remove(local)
				return st, err
			}
		}
		peak()
		if err := os.Remove(local); err != nil {
			return st, err
		}
	}
	if npy {
		for _, r := range sortedRanks(p.ranks) {
			rs := p.ranks[r]
			if complete(rs.dir) {
				continue
			}
			if err := writeNPY(rs, schema); err != nil {
				return st, err
			}
			peak()
		}
	}
	st.LocalizeSeconds = time.Since(started).Seconds()
	return st, nil
}

// complete reports whether a rank's npy folder was written whole.
func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil
}

// download copies one file of the split to local, checking its size
// against the manifest; the error names the file. It returns the bytes it
// read.
func download(ctx context.Context, store *s3store.Store, f checkpoint.File, local string) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		return 0, err
	}
	body, _, err := store.Get(ctx, f.Key)
	if err != nil {
		return 0, fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	defer body.Close()
	out, err := os.Create(local)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, body)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	if n != f.Size {
		return n, fmt.Errorf("read the split's file %s: %d bytes, the split's manifest says %d", f.Key, n, f.Size)
	}
	return n, nil
}

// copyRows writes rows [pc.Offset, pc.Offset+pc.Rows) of the Parquet file
// local into a Parquet file out (through a temporary name: a file there is
// whole).
func copyRows(local string, f checkpoint.File, pc shard.Piece, out string) error {
	in, err := os.Open(local)
	if err != nil {
		return err
	}
	defer in.Close()
	pf, err := parquet.OpenFile(in, f.Size)
	if err != nil {
		return fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	if pf.NumRows() != f.Rows {
		return fmt.Errorf("read the split's file %s: %d rows, the split's manifest says %d", f.Key, pf.NumRows(), f.Rows)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := copyRange(pf, pc, w); err != nil {
		w.Close()
		return fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// copyRange copies the piece's rows of pf to w as a Parquet file of the
// same schema.
func copyRange(pf *parquet.File, pc shard.Piece, w io.Writer) error {
	r := parquet.NewReader(pf)
	defer r.Close()
	return copyRowsOf(r, pf.Schema(), pc, w)
}

// rowSource is what copyRowsOf reads: a file's or a row group's rows.
type rowSource interface {
	parquet.RowReader
	parquet.RowSeeker
}

// copyRowsOf copies rows [pc.Offset, pc.Offset+pc.Rows) of r to w as a
// Parquet file of schema.
func copyRowsOf(r rowSource, schema *parquet.Schema, pc shard.Piece, w io.Writer) error {
	if err := r.SeekToRow(pc.Offset); err != nil {
		return err
	}
	pw := parquet.NewWriter(w, schema)
	buf := make([]parquet.Row, 1024)
	for left := pc.Rows; left > 0; {
		n, err := r.ReadRows(buf[:min(int64(len(buf)), left)])
		if n > 0 {
			if _, werr := pw.WriteRows(buf[:n]); werr != nil {
				return werr
			}
			left -= int64(n)
		}
		if errors.Is(err, io.EOF) && left > 0 {
			return fmt.Errorf("ends %d rows short of row %d", left, pc.Offset+pc.Rows)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return pw.Close()
}

// writeNPY converts a rank's pieces into its npy folder and deletes them.
func writeNPY(rs rankShare, schema dataset.Schema) error {
	var rows []any
	for _, pc := range rs.share.Pieces {
		name := filepath.Join(rs.dir, "pieces", fmt.Sprintf("part-%05d-%d-%d.parquet", pc.Unit, pc.Offset, pc.Rows))
		got, err := readAll(name)
		if err != nil {
			return fmt.Errorf("read rank %d's piece %s: %w", rs.share.Rank, name, err)
		}
		rows = append(rows, got...)
	}
	d, err := dataset.Load(schema, rows)
	if err != nil {
		return nodetype.Permanent(errtype.BadInput, "%s data: %v", split.TrainDataset, err)
	}
	if _, err := d.WriteNPY(rs.dir, schema); err != nil {
		return fmt.Errorf("write rank %d's share as npy: %w", rs.share.Rank, err)
	}
	if err := os.RemoveAll(filepath.Join(rs.dir, "pieces")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(rs.dir, ".complete"), nil, 0o644)
}

// readAll reads a local Parquet file's rows as the split's loader takes
// them.
func readAll(name string) ([]any, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, err
	}
	r := parquet.NewGenericReader[any](pf)
	defer r.Close()
	rows := make([]any, pf.NumRows())
	n, err := r.Read(rows)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if int64(n) != pf.NumRows() {
		return nil, fmt.Errorf("read %d of %d rows", n, pf.NumRows())
	}
	return rows, nil
}

// dirSize is the bytes of the files below dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, ierr := d.Info(); ierr == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func sortedRanks(m map[int]rankShare) []int { return slices.Sorted(maps.Keys(m)) }

// footerFetch is how much of a file's end one ranged read fetches for its
// footer: a split file's footer is a few KiB, so one read is the rule.
const footerFetch = 64 << 10

// segment is bytes of a file from offset off.
type segment struct {
	off int64
	b   []byte
}

// sparseFile is a Parquet file of which only some byte ranges were
// fetched: a row group's and the footer. A read outside them fails.
type sparseFile struct {
	key  string
	segs []segment
}

func (s *sparseFile) ReadAt(p []byte, off int64) (int, error) {
	for _, sg := range s.segs {
		if off >= sg.off && off < sg.off+int64(len(sg.b)) {
			n := copy(p, sg.b[off-sg.off:])
			if n < len(p) {
				return n, fmt.Errorf("%s: read of %d bytes at %d runs past the %d fetched at %d", s.key, len(p), off, len(sg.b), sg.off)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: read of %d bytes at %d, outside what was fetched", s.key, len(p), off)
}

// openGroup fetches row group k of the split's file number file, f, and
// its footer (once per file: footers keeps them, by file) with ranged reads, and opens them as
// Parquet. It returns the bytes it read; an error names the file.
func openGroup(ctx context.Context, store *s3store.Store, file int, f checkpoint.File, k int, footers map[int]segment) (*parquet.File, int64, error) {
	var read int64
	fail := func(err error) (*parquet.File, int64, error) {
		return nil, read, fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	foot, ok := footers[file]
	if !ok {
		// The footer follows the last row group: fetch what follows it,
		// up to footerFetch, and more only if the footer is longer.
		var end int64
		for _, g := range f.RowGroups {
			end = max(end, g.Offset+g.Size)
		}
		n := min(f.Size-end, footerFetch)
		b, err := store.GetRange(ctx, f.Key, f.Size-n, n)
		read += int64(len(b))
		if err != nil {
			return fail(err)
		}
		if len(b) < 8 || string(b[len(b)-4:]) != "PAR1" {
			return fail(errors.New("no Parquet footer"))
		}
		need := int64(binary.LittleEndian.Uint32(b[len(b)-8:])) + 8
		if need > f.Size-4 {
			return fail(fmt.Errorf("a footer of %d bytes in a file of %d", need, f.Size))
		}
		if need > n {
			if b, err = store.GetRange(ctx, f.Key, f.Size-need, need); err != nil {
				return fail(err)
			}
			read += int64(len(b))
		}
		foot = segment{off: f.Size - int64(len(b)), b: b}
		footers[file] = foot
	}
	g := f.RowGroups[k]
	body, err := store.GetRange(ctx, f.Key, g.Offset, g.Size)
	read += int64(len(body))
	if err != nil {
		return fail(err)
	}
	sf := &sparseFile{key: f.Key, segs: []segment{{off: 0, b: []byte("PAR1")}, {off: g.Offset, b: body}, foot}}
	pf, err := parquet.OpenFile(sf, f.Size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fail(err)
	}
	if len(pf.RowGroups()) != len(f.RowGroups) || pf.RowGroups()[k].NumRows() != g.Rows {
		return fail(fmt.Errorf("its footer's row groups disagree with the split's manifest"))
	}
	return pf, read, nil
}

// writePiece writes the piece's rows of row group k of pf (offsets within
// the group) to out, through a temporary name.
func writePiece(pf *parquet.File, k int, f checkpoint.File, pc shard.Piece, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	rows := pf.RowGroups()[k].Rows()
	err = copyRowsOf(rows, pf.Schema(), pc, w)
	rows.Close()
	if err != nil {
		w.Close()
		return fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
