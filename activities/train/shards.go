package train

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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

// DataRead is what one host read of the training data for its ranks, in
// a command trainer's outputs: their shares with shard_data, else the
// whole split (every host reads it all).
type DataRead struct {
	Ranks      []int `json:"ranks"`       // the ranks whose shares this host holds
	Rows       int64 `json:"rows"`        // their rows
	Shards     int   `json:"shards"`      // the row groups (or whole files) it read from the store
	BytesRead  int64 `json:"bytes_read"`  // what it read from the store for the training data
	SplitBytes int64 `json:"split_bytes"` // the training data's size in the store, for scale
	Reused     int   `json:"reused"`      // shard_data: pieces an earlier attempt on this host had written
	// RestRows are its ranks' rows of the rest of an interrupted epoch,
	// when the gang resumed it with another world size.
	RestRows int64 `json:"rest_rows,omitempty"`
	// DiskPeak is the most bytes the host's local training data held at
	// once (a downloaded file and what was written).
	DiskPeak int64 `json:"disk_peak"`
	// LocalizeSeconds is how long the data took; FirstStepSeconds is from
	// when the host began reading the data to its first progress line.
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
	_, err = planShards(sd, in.World, nil, "", nil)
	return err
}

// rankShare is one rank's share as the trainer sees it.
type rankShare struct {
	dir   string
	share shard.Share
}

// shardPlan is this host's part of the epoch's assignment, and of the
// rest of an interrupted epoch when the gang resumes it with another
// world size (shard.Resume).
type shardPlan struct {
	assign  shard.Assignment
	resumed shard.Resumed
	ds      checkpoint.Dataset
	units   []shardUnit       // what the assignment's pieces index
	ranks   map[int]rankShare // this host's ranks, by global rank
	rest    map[int]rankShare // their shares of the rest, if any
	root    string            // the host's shard cache for this split and world
	// stream: the trainer starts before the pieces are all in (Parquet
	// only), each appearing whole in its share's order, then .complete.
	stream bool
	// window: with stream, the most piece files a rank's folder holds at
	// once (0: no bound); the trainer removes each once read.
	window int
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
	e := trainer.ShardEnv{
		Data: rs.dir, Index: rank, Count: p.assign.World, Rows: rs.share.Rows,
		MinRows: p.assign.MinRows(), GlobalRows: p.assign.GlobalRows, Epoch: p.assign.Epoch,
		Stream: p.stream, Files: len(rs.share.Pieces), Window: p.window,
	}
	if rest, ok := p.rest[rank]; ok {
		a := p.resumed.Rest
		e.Rest = &trainer.ShardRest{Data: rest.dir, Epoch: p.resumed.Epoch, Rows: rest.share.Rows, MinRows: a.MinRows(), GlobalRows: a.GlobalRows, Files: len(rest.share.Pieces)}
		if rank < len(p.resumed.RestDone) {
			e.Rest.Done = min(max(p.resumed.RestDone[rank], 0), rest.share.Rows)
		}
	}
	return e.Environ()
}

// position is where a checkpoint stands in the ranks' shares, from what
// its progress line says: the epoch, and the rows each rank trained of
// its share (one figure: every rank's). Nil when the line says nothing,
// or names another number of ranks.
func (p *shardPlan) position(epoch int, done []int64) *shard.Position {
	world := p.assign.World
	switch {
	case len(done) == 1:
		done = slices.Repeat(done, world)
	case len(done) != world:
		return nil
	}
	pos := p.resumed.At(epoch, done)
	return &pos
}

// planShards assigns the split's training rows to the world's ranks and
// picks this host's (ranks are global ranks); with pos (where the
// checkpoint the gang resumes from stands, nil: none or unknown), also
// their shares of the rest of its epoch when the world size changed. It
// fails before anything is read, naming the counts, when there are fewer
// rows than ranks; a pos that does not fit the split fails with
// shard.ErrPosition.
func planShards(sd *split.Data, world int, ranks []int, node string, pos *shard.Position) (*shardPlan, error) {
	ds, _ := sd.Manifest.Dataset(split.TrainDataset)
	units := shardUnits(ds)
	rows := make([]int64, len(units))
	for i, u := range units {
		rows[i] = u.rows
	}
	if _, err := shard.Assign(rows, world, shardSeed, 0); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "shard_data: the split's training data has %d rows in %d files, too few for %d ranks: give the node fewer ranks, or train without shard_data", ds.Rows, len(ds.Files), world)
	}
	res, err := shard.Resume(rows, world, shardSeed, pos)
	if err != nil {
		return nil, err
	}
	a := res.Full
	// One cache per split and node (its retries share it; two nodes on
	// the same split never do), holding one world size's shares.
	sum := sha256.Sum256([]byte(sd.ManifestKey + "\x00" + node))
	root := filepath.Join(shardCacheDir(), hex.EncodeToString(sum[:12]), "w"+strconv.Itoa(world))
	p := &shardPlan{assign: a, resumed: res, ds: ds, units: units, ranks: map[int]rankShare{}, rest: map[int]rankShare{}, root: root}
	for _, r := range ranks {
		p.ranks[r] = rankShare{dir: filepath.Join(root, "rank-"+strconv.Itoa(r)), share: a.Shares[r]}
	}
	if res.Rest != nil {
		// The rest depends on where the epoch stood: its own folder.
		b, _ := json.Marshal(shard.Position{Epoch: res.Epoch, Stages: res.Prior})
		key := sha256.Sum256(b)
		dir := filepath.Join(root, "rest-"+hex.EncodeToString(key[:8]))
		for _, r := range ranks {
			p.rest[r] = rankShare{dir: filepath.Join(dir, "rank-"+strconv.Itoa(r)), share: res.Rest.Shares[r]}
		}
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
// (parquet or npy), reading each unit of the split it needs once, and
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
		order []int // the units to read, in the order the ranks first need them
		jobs  = map[int][]job{}
		npy   = format == split.FormatNPY
		// Streamed npy: each piece is an npy folder of its own, written
		// whole as it arrives, not one folder once the share is all in.
		npyPieces = npy && p.stream
	)
	for _, r := range sortedRanks(p.ranks) {
		st.Ranks = append(st.Ranks, r)
		st.Rows += p.ranks[r].share.Rows
		st.RestRows += p.rest[r].share.Rows
	}
	var todo []rankShare // the shares with pieces to write
	for _, rs := range p.shares() {
		if err := os.MkdirAll(rs.dir, 0o755); err != nil { // a share of no rows is an empty folder
			return st, err
		}
		if npy && complete(rs.dir) {
			st.Reused += len(rs.share.Pieces)
			continue
		}
		if p.stream {
			// Pieces of the other kind (a rerun in another data_format)
			// would be read as this one's, and count against the window.
			dropPieces(rs.dir, !npyPieces)
		}
		todo = append(todo, rs)
	}
	// The ranks' k-th pieces before any (k+1)-th, so that every rank's
	// first pieces are in early (a streaming trainer starts on them).
	// With a window the rests' pieces come before the shares' (a trainer
	// trains its rest first: the host must not wait on a full window of
	// its share's files while the trainer waits for its rest's).
	passes := [][]rankShare{todo}
	if p.window > 0 {
		passes = [][]rankShare{nil, nil}
		for _, rs := range todo {
			if _, isRest := p.rest[rs.share.Rank]; isRest && rs.dir == p.rest[rs.share.Rank].dir {
				passes[0] = append(passes[0], rs)
			} else {
				passes[1] = append(passes[1], rs)
			}
		}
	}
	for _, pass := range passes {
		for k := 0; ; k++ {
			more := false
			for _, rs := range pass {
				if k >= len(rs.share.Pieces) {
					continue
				}
				more = true
				pc := rs.share.Pieces[k]
				out := piecePath(rs.dir, k, pc, npy, npyPieces)
				if _, err := os.Stat(out); err == nil {
					st.Reused++
					continue
				}
				if _, ok := jobs[pc.Unit]; !ok {
					order = append(order, pc.Unit)
				}
				jobs[pc.Unit] = append(jobs[pc.Unit], job{rank: rs.share.Rank, piece: pc, out: out})
			}
			if !more {
				break
			}
		}
	}
	if len(st.Ranks) == 0 {
		return st, nil
	}
	// This host's own folders: hosts that share a temp folder (workers of
	// one machine) share the node's cache, each rank its own folder.
	incoming := filepath.Join(p.root, fmt.Sprintf("incoming-%d", st.Ranks[0]))
	peak := func() {
		n := dirSize(incoming)
		for _, rs := range p.shares() {
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
				if err := p.waitWindow(ctx, j.out); err != nil {
					return st, err
				}
				if err := asPiece(j.out, npyPieces, schema, func(out string) error {
					return writePiece(pf, unit.group, f, j.piece, out)
				}); err != nil {
					return st, err
				}
				peak()
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
			if err := p.waitWindow(ctx, j.out); err != nil {
				os.Remove(local)
				return st, err
			}
			if err := asPiece(j.out, npyPieces, schema, func(out string) error {
				return copyRows(local, f, j.piece, out)
			}); err != nil {
				os.Remove(local)
				return st, err
			}
			peak()
		}
		peak()
		if err := os.Remove(local); err != nil {
			return st, err
		}
	}
	if p.stream {
		// Every piece is in: a streaming trainer stops waiting for more.
		for _, rs := range p.shares() {
			if err := os.WriteFile(filepath.Join(rs.dir, ".complete"), nil, 0o644); err != nil {
				return st, err
			}
		}
	}
	if npy {
		for _, rs := range p.shares() {
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

// shares are this host's ranks' shares of the rest, which they train
// first, then their shares.
func (p *shardPlan) shares() []rankShare {
	var out []rankShare
	for _, r := range sortedRanks(p.rest) {
		out = append(out, p.rest[r])
	}
	for _, r := range sortedRanks(p.ranks) {
		out = append(out, p.ranks[r])
	}
	return out
}

// piecePath is where the k-th piece of a share is written: named in the
// share's order, so that a trainer reading a Parquet share's files by
// name reads its rows in the order its position counts them.
func piecePath(dir string, k int, pc shard.Piece, npy, npyPieces bool) string {
	name := fmt.Sprintf("part-%05d-u%d-%d-%d.parquet", k, pc.Unit, pc.Offset, pc.Rows)
	if npyPieces {
		return filepath.Join(dir, strings.TrimSuffix(name, ".parquet")) // an npy folder
	}
	if npy {
		return filepath.Join(dir, "pieces", name)
	}
	return filepath.Join(dir, name)
}

// complete reports whether a rank's npy folder was written whole.
func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil
}

// writeNPY converts a rank's pieces into its npy folder and deletes them.
func writeNPY(rs rankShare, schema dataset.Schema) error {
	var rows []any
	for k, pc := range rs.share.Pieces {
		name := piecePath(rs.dir, k, pc, true, false)
		got, err := readAll(name)
		if err != nil {
			return fmt.Errorf("read rank %d's piece %s: %w", rs.share.Rank, name, err)
		}
		rows = append(rows, got...)
	}
	// In the share's order (not sorted by request id): a trainer's
	// position in its share (shard_done) counts rows in this order.
	d, err := dataset.LoadBatch(schema, rows)
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
