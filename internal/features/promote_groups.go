package features

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

// pending is the object a bucket activity leaves for the commit.
type pending struct {
	Promotion string   `json:"promotion_id"`
	Buckets   []int    `json:"buckets"`
	Replaced  []string `json:"replaced"` // training data files of the partitions it rewrote
	Added     [][]byte `json:"added"`    // its data files, Avro-encoded as in a manifest
}

// PromoteBuckets joins the staged features into the training rows of the
// given buckets, partition by partition (date and bucket): it reads only
// the files of those partitions on both sides, builds a hash index of the
// staging rows of a partition and probes it with the training rows of the
// same partition, so no row moves between buckets. It writes new data
// files for the partitions and records them, with the files they replace,
// in an object under the plan's pending dir; it commits nothing.
func PromoteBuckets(ctx context.Context, cat *lake.Catalog, plan *PromotionPlan, buckets []int, log *slog.Logger) (BucketResult, error) {
	if log == nil {
		log = slog.Default()
	}
	res := BucketResult{Buckets: buckets}
	s, err := resolve(ctx, cat, plan)
	if err != nil {
		return res, err
	}
	if s.stale != "" {
		log.Info("promote: table moved; skipping buckets", "reason", s.stale, "buckets", buckets)
		res.Stale = true
		return res, nil
	}
	filter := table.WithRowFilter(lake.DateRange(plan.Spec.DateColumn, int32(s.rng.Start), int32(s.rng.End)))
	// The training rows as the plan saw them: at its base snapshot, even
	// if another commit has landed since (on other partitions, the commit
	// checks, or the promotion is planned again).
	base := table.WithSnapshotID(plan.BaseSnapshot)
	trainScan := lake.Scan(ctx, s.training, filter, base)
	trainParts, err := lake.PlanPartitions(ctx, s.training, trainScan)
	if err != nil {
		return res, err
	}
	want := map[int64]bool{}
	for _, b := range buckets {
		want[int64(b)] = true
	}
	var mine []lake.Partition
	for _, p := range trainParts {
		if want[p.Values[plan.BucketColumn]] {
			mine = append(mine, p)
		}
	}
	// The staging side: each staging table's files by partition key, at
	// the snapshot the plan pinned.
	stagingScans := make([]*table.Scan, len(s.staging))
	stagingParts := make([]map[string]lake.Partition, len(s.staging))
	for i, st := range s.staging {
		stagingParts[i] = map[string]lake.Partition{}
		if plan.StagingSnapshots[i] == 0 {
			continue
		}
		stagingScans[i] = lake.Scan(ctx, st, filter, table.WithSnapshotID(plan.StagingSnapshots[i]))
		parts, err := lake.PlanPartitions(ctx, st, stagingScans[i])
		if err != nil {
			return res, fmt.Errorf("staging table %s: %w", st.Identifier(), err)
		}
		for _, p := range parts {
			if want[p.Values[plan.BucketColumn]] {
				stagingParts[i][p.Key] = p
			}
		}
	}
	// Reads sized to the files: batches as large as the largest file
	// read, not iceberg-go's default.
	sized := [][]lake.Partition{mine}
	for i := range stagingParts {
		for _, p := range stagingParts[i] {
			sized = append(sized, []lake.Partition{p})
		}
	}
	size := table.WithArrowBatchSize(batchRows(sized...))
	trainScan = lake.Scan(ctx, s.training, filter, base, size)
	for i, st := range s.staging {
		if stagingScans[i] != nil {
			stagingScans[i] = lake.Scan(ctx, st, filter, table.WithSnapshotID(plan.StagingSnapshots[i]), size)
		}
	}
	outSchema, err := table.SchemaToArrowSchema(s.target.Schema(), nil, true, false)
	if err != nil {
		return res, err
	}
	// One pool for the bucket group's reads, joins and writes (see Stage).
	mem := lake.NewPoolAllocator()
	ctx = compute.WithAllocator(ctx, mem)
	var replaced []string
	for _, p := range mine {
		for _, t := range p.Tasks {
			replaced = append(replaced, t.File.FilePath())
		}
	}
	j := &bucketJoin{plan: plan, s: s, mem: mem, out: outSchema, trainScan: trainScan, stagingScans: stagingScans, stagingParts: stagingParts, res: &res}
	// Rows come partition by partition, each batch from one partition, so
	// they go to the writer as they are.
	files, err := lake.WritePartitions(ctx, s.target.Table, outSchema, j.records(ctx, mine))
	if err != nil {
		return res, err
	}
	encoded, err := lake.EncodeDataFiles(s.target.Table, s.target.Schema(), files)
	if err != nil {
		return res, err
	}
	res.URI = fmt.Sprintf("%s/buckets-%d.json", plan.PendingDir, buckets[0])
	if err := writePending(ctx, s.target.Table, res.URI, pending{Promotion: plan.ID, Buckets: buckets, Replaced: replaced, Added: encoded}); err != nil {
		return res, err
	}
	res.Files, res.Partitions = len(files), len(mine)
	return res, nil
}

func writePending(ctx context.Context, tbl *table.Table, uri string, p pending) error {
	obj, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return lake.WriteObject(ctx, tbl, uri, obj)
}

// bucketJoin streams the joined rows of a bucket group.
type bucketJoin struct {
	plan         *PromotionPlan
	s            *promotionState
	mem          memory.Allocator
	out          *arrow.Schema
	trainScan    *table.Scan
	stagingScans []*table.Scan
	stagingParts []map[string]lake.Partition
	res          *BucketResult
}

// stagingSide is one staging table's rows of one partition.
type stagingSide struct {
	names []string      // the promoted columns it brings
	keys  []arrow.Array // its primary key columns
	cols  []arrow.Array // its promoted columns, in names order
	all   []arrow.Array // everything read, to release
	index *backfill.KeyIndex
	// Staging rows are written in the training table's order (stage 1
	// reads the training partition in file order), so while the keys of
	// the two sides line up row for row the join is a zip: no hashing, no
	// gather, the staged columns are sliced. pos is how far they lined up;
	// aligned turns false at the first mismatch, and the rest of the
	// partition is joined through the hash index.
	pos     int
	aligned bool
}

// match says how one batch of training rows gets a side's columns: by
// slicing the staged columns (aligned) or by index (-1: no staged row).
type match struct {
	slices []arrow.Array // owned
	idx    []int32
}

// columnsOf lists the promoted columns staging table i brings.
func (j *bucketJoin) columnsOf(i int) []string {
	var names []string
	for _, c := range j.s.checked.Columns {
		if c.Staging == i {
			names = append(names, c.Name)
		}
	}
	return names
}

// readSide reads staging table i's rows of a partition.
func (j *bucketJoin) readSide(ctx context.Context, i int, p lake.Partition) (*stagingSide, error) {
	sp, ok := j.stagingParts[i][p.Key]
	if !ok {
		return nil, nil // no staged rows here: the features are null
	}
	pk := j.s.checked.PrimaryKey
	names := j.columnsOf(i)
	arrs, n, err := readTasks(ctx, j.mem, j.stagingScans[i], sp.Tasks, append(slices.Clone(pk), names...))
	if err != nil {
		return nil, fmt.Errorf("read staging %s partition %s: %w", j.plan.Spec.Staging[i], p.Key, err)
	}
	if n == 0 {
		return nil, nil
	}
	return &stagingSide{names: names, keys: arrs[:len(pk)], cols: arrs[len(pk):], all: arrs, aligned: true}, nil
}

func (j *bucketJoin) records(ctx context.Context, parts []lake.Partition) iter.Seq2[lake.PartitionBatch, error] {
	return func(yield func(lake.PartitionBatch, error) bool) {
		for _, p := range parts {
			sides := make([]*stagingSide, len(j.s.staging))
			cleanup := func() {
				for _, sd := range sides {
					if sd != nil {
						release(sd.all)
					}
				}
			}
			t0 := time.Now()
			for i := range j.s.staging {
				sd, err := j.readSide(ctx, i, p)
				if err != nil {
					cleanup()
					yield(lake.PartitionBatch{}, err)
					return
				}
				sides[i] = sd
			}
			j.res.JoinTime += time.Since(t0)
			_, recs, err := j.trainScan.ReadTasks(ctx, p.Tasks)
			if err != nil {
				cleanup()
				yield(lake.PartitionBatch{}, err)
				return
			}
			for rec, err := range recs {
				if err != nil {
					cleanup()
					yield(lake.PartitionBatch{}, fmt.Errorf("read training partition %s: %w", p.Key, err))
					return
				}
				t0 := time.Now()
				joined, err := j.join(ctx, rec, sides)
				j.res.JoinTime += time.Since(t0)
				rec.Release()
				if err != nil {
					cleanup()
					yield(lake.PartitionBatch{}, fmt.Errorf("partition %s: %w", p.Key, err))
					return
				}
				if !yield(lake.PartitionBatch{Values: p.Values, Record: joined}, nil) {
					cleanup()
					return
				}
			}
			cleanup()
		}
	}
}

// matchSide finds the staged rows of one batch of training rows.
func (j *bucketJoin) matchSide(sd *stagingSide, keys []arrow.Array) (match, error) {
	n := keys[0].Len()
	if sd.aligned && sd.pos+n <= sd.keys[0].Len() {
		same := true
		for k := range keys {
			if !arrow.TypeEqual(keys[k].DataType(), sd.keys[k].DataType()) ||
				!array.SliceEqual(keys[k], 0, int64(n), sd.keys[k], int64(sd.pos), int64(sd.pos+n)) {
				same = false
				break
			}
		}
		if same {
			m := match{slices: make([]arrow.Array, len(sd.cols))}
			for c, col := range sd.cols {
				m.slices[c] = array.NewSlice(col, int64(sd.pos), int64(sd.pos+n))
			}
			sd.pos += n
			return m, nil
		}
	}
	sd.aligned = false
	if sd.index == nil {
		ix, err := backfill.NewKeyIndex(j.s.checked.PrimaryKey, sd.keys)
		if err != nil {
			return match{}, badInput("staging table: %v", err)
		}
		sd.index = ix
	}
	idx, err := sd.index.Lookup(keys)
	return match{idx: idx}, err
}

// join attaches the promoted columns to one batch of training rows.
func (j *bucketJoin) join(ctx context.Context, rec arrow.RecordBatch, sides []*stagingSide) (arrow.RecordBatch, error) {
	n := int(rec.NumRows())
	keys, err := columns(rec, j.s.checked.PrimaryKey)
	if err != nil {
		return nil, err
	}
	promoted := map[string]arrow.Array{}
	defer func() {
		for _, a := range promoted {
			a.Release()
		}
	}()
	hit := make([]bool, n)
	for i, sd := range sides {
		if sd == nil {
			for _, name := range j.columnsOf(i) {
				f, _ := j.out.FieldsByName(name)
				promoted[name] = array.MakeArrayOfNull(j.mem, f[0].Type, n)
			}
			continue
		}
		m, err := j.matchSide(sd, keys)
		if err != nil {
			return nil, err
		}
		if m.idx == nil {
			for r := range hit {
				hit[r] = true
			}
			for k, name := range sd.names {
				promoted[name] = m.slices[k]
			}
			continue
		}
		for r, v := range m.idx {
			if v >= 0 {
				hit[r] = true
			}
		}
		taken, err := backfill.Take(ctx, j.mem, sd.cols, m.idx)
		if err != nil {
			return nil, err
		}
		for k, name := range sd.names {
			promoted[name] = taken[k]
		}
	}
	for _, h := range hit {
		if h {
			j.res.Matched++
		}
	}
	out := make([]arrow.Array, 0, j.out.NumFields())
	defer func() { release(out) }()
	for _, f := range j.out.Fields() {
		src, ok := promoted[f.Name]
		if !ok {
			if src, err = column(rec, f.Name); err != nil {
				return nil, err
			}
		}
		c, err := conform(src, f.Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", f.Name, err)
		}
		out = append(out, c)
	}
	j.res.Rows += int64(n)
	return array.NewRecordBatch(j.out, out, int64(n)), nil
}
