package features

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

// PromoteSpec is a stage-2 job: promote the feature columns of staging
// tables into the training table for a date range.
type PromoteSpec struct {
	Training   string   `json:"training_table"`
	Staging    []string `json:"staging_tables"`
	StartDate  string   `json:"start_date"`
	EndDate    string   `json:"end_date"`
	DateColumn string   `json:"date_column,omitempty"`   // default "date"
	Groups     int      `json:"bucket_groups,omitempty"` // bucket activities; default one per bucket
}

// PromotionPlan is a checked promotion against one version of the training
// table (its base snapshot). It is small JSON: the Temporal workflow passes
// it to every bucket activity and to the commit. Everything a bucket
// activity writes is derived from it, and the commit lands only if the
// table is still at the base snapshot; otherwise the promotion is planned
// again on the fresh table.
type PromotionPlan struct {
	Spec             PromoteSpec     `json:"spec"`
	ID               string          `json:"promotion_id"` // recorded in the snapshot summary: the commit's idempotency key
	BaseSnapshot     int64           `json:"base_snapshot_id,string"`
	BaseSchema       int             `json:"base_schema_id"`
	StagingSnapshots []int64         `json:"staging_snapshot_ids"` // pinned: every bucket reads the same staging data
	TargetSchema     json.RawMessage `json:"target_schema"`        // training schema with the new columns
	Columns          []string        `json:"columns"`              // promoted columns
	NewColumns       []string        `json:"new_columns"`          // of which the training table lacks
	BucketColumn     string          `json:"bucket_column"`
	Groups           [][]int         `json:"groups"` // buckets per activity
	Rows             int64           `json:"rows"`   // training rows in the range
	Partitions       int             `json:"partitions"`
	PendingDir       string          `json:"pending_dir"`
}

// BucketResult is what one bucket activity wrote, by reference: the data
// files it wrote are listed in a small object at URI, never in the result.
type BucketResult struct {
	URI        string `json:"uri"`
	Buckets    []int  `json:"buckets"`
	Rows       int64  `json:"rows"`
	Matched    int64  `json:"matched"` // rows that got a value from some staging table
	Files      int    `json:"files"`
	Partitions int    `json:"partitions"`
	Stale      bool   `json:"stale,omitempty"` // the table moved past the plan's base: nothing written
	// JoinTime is the time spent reading the staging side and joining,
	// without reading the training rows or writing the result.
	JoinTime time.Duration `json:"join_time"`
}

// pending is the object a bucket activity leaves for the commit.
type pending struct {
	Promotion string   `json:"promotion_id"`
	Buckets   []int    `json:"buckets"`
	Replaced  []string `json:"replaced"` // training data files of the partitions it rewrote
	Added     [][]byte `json:"added"`    // its data files, Avro-encoded as in a manifest
}

// CommitResult is the outcome of a promotion commit.
type CommitResult struct {
	Conflict         bool   `json:"conflict,omitempty"` // the table moved: plan again
	CurrentSnapshot  int64  `json:"current_snapshot_id,string,omitempty"`
	PreviousSnapshot int64  `json:"previous_snapshot_id,string"`
	Snapshot         int64  `json:"snapshot_id,string"`
	Already          bool   `json:"already,omitempty"` // an earlier attempt had committed it
	Files            int    `json:"files"`
	Replaced         int    `json:"replaced"`
	Reason           string `json:"reason,omitempty"`
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// PlanPromotion checks a promotion and plans it on the training table as
// it is now. Bad input (a missing table, a staging table partitioned
// differently, a key column of another type, an empty date range) is
// reported here, before anything is written. id identifies this attempt
// at the promotion (for example run/node/round) and must be unique to it.
func PlanPromotion(ctx context.Context, cat *lake.Catalog, spec PromoteSpec, id string) (*PromotionPlan, error) {
	if spec.DateColumn == "" {
		spec.DateColumn = "date"
	}
	if id == "" {
		return nil, fmt.Errorf("promotion id is empty")
	}
	rng, err := backfill.ParseDateRange(spec.StartDate, spec.EndDate)
	if err != nil {
		return nil, badInput("%v", err)
	}
	training, err := loadInput(ctx, cat, "training table", spec.Training)
	if err != nil {
		return nil, err
	}
	if len(spec.Staging) == 0 {
		return nil, badInput("no staging tables given")
	}
	staging, stagingChecked, checked, err := checkPromotion(ctx, cat, training, spec)
	if err != nil {
		return nil, err
	}
	plan := &PromotionPlan{Spec: spec, ID: id}
	for _, st := range staging {
		var snap int64
		if s := st.CurrentSnapshot(); s != nil {
			snap = s.SnapshotID
		}
		plan.StagingSnapshots = append(plan.StagingSnapshots, snap)
	}
	if err := checkDateColumn(training, spec.Training, spec.DateColumn); err != nil {
		return nil, err
	}
	cur := training.CurrentSnapshot()
	if cur == nil {
		return nil, badInput("training table %s has no data", spec.Training)
	}
	plan.BaseSnapshot, plan.BaseSchema = cur.SnapshotID, training.Schema().ID
	plan.BucketColumn = checked.BucketColumn
	for _, c := range checked.Columns {
		plan.Columns = append(plan.Columns, c.Name)
		if !c.Existing {
			plan.NewColumns = append(plan.NewColumns, c.Name)
		}
	}
	target, err := targetTable(training, stagingChecked, checked)
	if err != nil {
		return nil, err
	}
	if plan.TargetSchema, err = json.Marshal(target.Schema()); err != nil {
		return nil, err
	}

	parts, err := lake.PlanPartitions(ctx, training, training.Scan(table.WithRowFilter(lake.DateRange(spec.DateColumn, int32(rng.Start), int32(rng.End)))))
	if err != nil {
		return nil, err
	}
	rows := map[int]int64{}
	for _, p := range parts {
		b, ok := p.Values[checked.BucketColumn]
		if !ok {
			return nil, fmt.Errorf("partition %s has no bucket value", p.Key)
		}
		rows[int(b)] += p.Rows
		plan.Rows += p.Rows
	}
	if plan.Rows == 0 {
		return nil, badInput("training table %s has no rows between %s and %s", spec.Training, rng.Start, rng.End)
	}
	plan.Partitions = len(parts)
	groups := spec.Groups
	if groups <= 0 {
		groups = checked.Buckets
	}
	plan.Groups = backfill.GroupBuckets(rows, groups)
	plan.PendingDir = strings.TrimRight(training.Location(), "/") + "/metadata/retrain-promotions/" + unsafeID.ReplaceAllString(id, "_")
	return plan, nil
}

// checkPromotion loads a promotion's staging tables and checks them
// against the training table as it is now: the staging tables, their
// description for the schema change, and the checked columns.
func checkPromotion(ctx context.Context, cat *lake.Catalog, training *table.Table, spec PromoteSpec) ([]*table.Table, []backfill.Staging, backfill.PromotePlan, error) {
	trainSpec, _, err := specOf(training)
	if err != nil {
		return nil, nil, backfill.PromotePlan{}, err
	}
	check := backfill.PromoteCheck{
		Training: spec.Training, TrainingSchema: training.Schema(), TrainingSpec: trainSpec,
		Promoted: splitList(training.Properties()[PropPromoted]),
	}
	var tables []*table.Table
	for _, name := range spec.Staging {
		if name == spec.Training {
			return nil, nil, backfill.PromotePlan{}, badInput("staging table %s is the training table", name)
		}
		st, err := loadInput(ctx, cat, "staging table", name)
		if err != nil {
			return nil, nil, backfill.PromotePlan{}, err
		}
		sspec, _, err := specOf(st)
		if err != nil {
			return nil, nil, backfill.PromotePlan{}, err
		}
		tables = append(tables, st)
		check.Staging = append(check.Staging, backfill.Staging{Name: name, Schema: st.Schema(), Spec: sspec})
	}
	checked, err := check.Check()
	if err != nil {
		return nil, nil, backfill.PromotePlan{}, badInput("%v", err)
	}
	return tables, check.Staging, checked, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// targetTable stages the schema change of a promotion on a new
// transaction of tbl and returns the staged table. For the same table version and
// columns it assigns the same field ids, which is what lets bucket
// activities and the commit agree on the schema without shipping it.
func targetTable(tbl *table.Table, staging []backfill.Staging, checked backfill.PromotePlan) (*table.StagedTable, error) {
	tx := tbl.NewTransaction()
	if err := stageSchema(tx, staging, checked); err != nil {
		return nil, err
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return nil, fmt.Errorf("stage schema of %s: %w", lake.Name(tbl.Identifier()), err)
	}
	return staged, nil
}

func stageSchema(tx *table.Transaction, staging []backfill.Staging, checked backfill.PromotePlan) error {
	var adds []backfill.PromoteColumn
	for _, c := range checked.Columns {
		if !c.Existing {
			adds = append(adds, c)
		}
	}
	if len(adds) == 0 {
		return nil
	}
	us := tx.UpdateSchema(true, false)
	for _, c := range adds {
		f, _ := staging[c.Staging].Schema.FindFieldByName(c.Name)
		us = us.AddColumn([]string{c.Name}, c.Type, f.Doc, false, nil)
	}
	if err := us.Commit(); err != nil {
		return fmt.Errorf("add columns: %w", err)
	}
	return nil
}

// promotionState is a plan re-resolved against the catalog by a bucket
// activity or the commit.
type promotionState struct {
	training       *table.Table
	target         *table.StagedTable
	staging        []*table.Table
	stagingChecked []backfill.Staging // staging, as checked
	checked        backfill.PromotePlan
	rng            backfill.DateRange
	stale          string // why the table no longer matches the plan; "" if it does
}

// resolve loads the tables of a plan and rebuilds its target schema. If
// the training table has moved past the plan's base (another commit
// landed), stale says so and nothing should be written.
func resolve(ctx context.Context, cat *lake.Catalog, plan *PromotionPlan) (*promotionState, error) {
	s := &promotionState{}
	var err error
	if s.rng, err = backfill.ParseDateRange(plan.Spec.StartDate, plan.Spec.EndDate); err != nil {
		return nil, badInput("%v", err)
	}
	if s.training, err = loadInput(ctx, cat, "training table", plan.Spec.Training); err != nil {
		return nil, err
	}
	cur := s.training.CurrentSnapshot()
	switch {
	case cur == nil || cur.SnapshotID != plan.BaseSnapshot:
		var id int64
		if cur != nil {
			id = cur.SnapshotID
		}
		s.stale = fmt.Sprintf("training table %s moved from snapshot %d to %d", plan.Spec.Training, plan.BaseSnapshot, id)
		return s, nil
	case s.training.Schema().ID != plan.BaseSchema:
		s.stale = fmt.Sprintf("training table %s schema moved from %d to %d", plan.Spec.Training, plan.BaseSchema, s.training.Schema().ID)
		return s, nil
	}
	if s.staging, s.stagingChecked, s.checked, err = checkPromotion(ctx, cat, s.training, plan.Spec); err != nil {
		return nil, err
	}
	if s.target, err = targetTable(s.training, s.stagingChecked, s.checked); err != nil {
		return nil, err
	}
	got, err := json.Marshal(s.target.Schema())
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(got, plan.TargetSchema) {
		s.stale = fmt.Sprintf("training table %s would get another schema than planned", plan.Spec.Training)
	}
	return s, nil
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
	trainScan := s.training.Scan(filter)
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
		stagingScans[i] = st.Scan(filter, table.WithSnapshotID(plan.StagingSnapshots[i]))
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
	trainScan = s.training.Scan(filter, size)
	for i, st := range s.staging {
		if stagingScans[i] != nil {
			stagingScans[i] = st.Scan(filter, table.WithSnapshotID(plan.StagingSnapshots[i]), size)
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

// CommitPromotion lands the files the bucket activities wrote as one
// snapshot of the training table that replaces exactly the partitions they
// rewrote, together with the schema change. It is idempotent: a retry
// after a commit whose result was lost finds the snapshot by the plan's
// promotion id and reports it instead of committing again. If the table
// has moved since the plan was made it commits nothing and reports a
// conflict, and the promotion must be planned and run again.
func CommitPromotion(ctx context.Context, cat *lake.Catalog, plan *PromotionPlan, results []BucketResult, log *slog.Logger) (CommitResult, error) {
	if log == nil {
		log = slog.Default()
	}
	res := CommitResult{PreviousSnapshot: plan.BaseSnapshot}
	var out CommitResult
	tbl, err := cat.Update(ctx, plan.Spec.Training, func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		out = res
		cur := tbl.CurrentSnapshot()
		if cur != nil {
			// Committed already (by an attempt whose result was lost)?
			for _, snap := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
				if snap.SnapshotID == plan.BaseSnapshot {
					break
				}
				if snap.Summary != nil && snap.Summary.Properties[PropPromotionID] == plan.ID {
					out.Already, out.Snapshot = true, snap.SnapshotID
					return nil
				}
			}
		}
		for _, r := range results {
			if r.Stale {
				out.Conflict, out.Reason = true, "a bucket activity found the table moved"
			}
		}
		s, err := resolve(ctx, cat, plan)
		if err != nil {
			return err
		}
		if s.stale != "" {
			out.Conflict, out.Reason = true, s.stale
		}
		if out.Conflict {
			if cur != nil {
				out.CurrentSnapshot = cur.SnapshotID
			}
			return nil
		}
		// The transaction Update gave us pins main at the base; stage the
		// schema change and the file replacement on it.
		if err := stageSchema(tx, s.stagingChecked, s.checked); err != nil {
			return err
		}
		staged, err := tx.StagedTable()
		if err != nil {
			return err
		}
		if got, _ := json.Marshal(staged.Schema()); !bytes.Equal(got, plan.TargetSchema) {
			out.Conflict, out.Reason = true, "schema differs from the plan"
			return nil
		}
		var add []iceberg.DataFile
		replace := map[string]bool{}
		for _, r := range results {
			raw, err := lake.ReadObject(ctx, tbl, r.URI)
			if err != nil {
				return err
			}
			var p pending
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("pending files %s: %w", r.URI, err)
			}
			if p.Promotion != plan.ID {
				return fmt.Errorf("pending files %s belong to promotion %s, not %s", r.URI, p.Promotion, plan.ID)
			}
			files, err := lake.DecodeDataFiles(staged.Table, staged.Schema(), p.Added)
			if err != nil {
				return fmt.Errorf("pending files %s: %w", r.URI, err)
			}
			add = append(add, files...)
			for _, path := range p.Replaced {
				replace[path] = true
			}
		}
		existing, err := lake.FilesOf(ctx, tbl.Scan())
		if err != nil {
			return err
		}
		var del []iceberg.DataFile
		for _, df := range existing {
			if replace[df.FilePath()] {
				del = append(del, df)
				delete(replace, df.FilePath())
			}
		}
		if len(replace) > 0 {
			return fmt.Errorf("promotion %s: %d replaced files are no longer in the table", plan.ID, len(replace))
		}
		props := iceberg.Properties{
			PropPromotionID:             plan.ID,
			"retrain.promotion.columns": strings.Join(plan.Columns, ","),
			"retrain.promotion.range":   plan.Spec.StartDate + ".." + plan.Spec.EndDate,
		}
		if err := lake.ReplaceFiles(ctx, tx, del, add, props); err != nil {
			return err
		}
		promoted := splitList(tbl.Properties()[PropPromoted])
		for _, c := range plan.Columns {
			if !slices.Contains(promoted, c) {
				promoted = append(promoted, c)
			}
		}
		sort.Strings(promoted)
		if err := tx.SetProperties(iceberg.Properties{PropPromoted: strings.Join(promoted, ",")}); err != nil {
			return err
		}
		out.Files, out.Replaced = len(add), len(del)
		return nil
	})
	if err != nil {
		if lake.IsConflict(err) {
			// Lost the race at the catalog after the checks: nothing landed.
			return CommitResult{Conflict: true, PreviousSnapshot: plan.BaseSnapshot, Reason: err.Error()}, nil
		}
		return out, err
	}
	if out.Conflict || out.Already {
		return out, nil
	}
	out.Snapshot = tbl.CurrentSnapshot().SnapshotID
	// The pending lists have served; a retried commit finds the snapshot
	// by its promotion id, not through them.
	for _, r := range results {
		if err := lake.RemoveObject(ctx, tbl, r.URI); err != nil {
			log.Debug("promote: cannot remove pending list", "uri", r.URI, "error", err)
		}
	}
	log.Info("promote: committed", "table", plan.Spec.Training, "previous", out.PreviousSnapshot, "snapshot", out.Snapshot, "files", out.Files, "replaced", out.Replaced)
	return out, nil
}

// PromoteResult reports a whole promotion.
type PromoteResult struct {
	Training         string        `json:"training_table"`
	PreviousSnapshot int64         `json:"previous_snapshot_id,string"`
	Snapshot         int64         `json:"snapshot_id,string"`
	Rows             int64         `json:"rows"`
	Matched          int64         `json:"matched"`
	Columns          []string      `json:"columns"`
	Partitions       int           `json:"partitions"`
	Files            int           `json:"files"`
	Rounds           int           `json:"rounds"`
	Elapsed          time.Duration `json:"elapsed"`
	JoinTime         time.Duration `json:"join_time"` // summed over bucket groups
}

// MaxRounds bounds how often a promotion is redone after losing a race.
const MaxRounds = 5

// Promote runs a whole promotion in this process: plan, every bucket
// group (parallel up to workers), commit; and again from a fresh plan if
// another commit landed first. The Temporal workflow does the same with
// one activity per step.
func Promote(ctx context.Context, cat *lake.Catalog, spec PromoteSpec, id string, workers int, log *slog.Logger) (PromoteResult, error) {
	if log == nil {
		log = slog.Default()
	}
	started := time.Now()
	res := PromoteResult{Training: spec.Training}
	for round := 1; round <= MaxRounds; round++ {
		res.Rounds = round
		plan, err := PlanPromotion(ctx, cat, spec, id+"/"+strconv.Itoa(round))
		if err != nil {
			return res, err
		}
		results, err := runGroups(ctx, cat, plan, workers, log)
		if err != nil {
			return res, err
		}
		c, err := CommitPromotion(ctx, cat, plan, results, log)
		if err != nil {
			return res, err
		}
		if c.Conflict {
			log.Info("promote: another commit landed first; redoing the promotion on the fresh table", "table", spec.Training, "round", round, "reason", c.Reason)
			continue
		}
		res.PreviousSnapshot, res.Snapshot, res.Columns, res.Partitions, res.Files = c.PreviousSnapshot, c.Snapshot, plan.Columns, plan.Partitions, c.Files
		for _, r := range results {
			res.Rows += r.Rows
			res.Matched += r.Matched
			res.JoinTime += r.JoinTime
		}
		res.Elapsed = time.Since(started)
		return res, nil
	}
	return res, fmt.Errorf("promotion into %s lost the race %d times in a row", spec.Training, MaxRounds)
}

func runGroups(ctx context.Context, cat *lake.Catalog, plan *PromotionPlan, workers int, log *slog.Logger) ([]BucketResult, error) {
	workers = max(1, workers)
	results := make([]BucketResult, len(plan.Groups))
	errs := make([]error, len(plan.Groups))
	sem := make(chan struct{}, workers)
	done := make(chan struct{})
	for i, g := range plan.Groups {
		go func() {
			sem <- struct{}{}
			results[i], errs[i] = PromoteBuckets(ctx, cat, plan, g, log)
			<-sem
			done <- struct{}{}
		}()
	}
	for range plan.Groups {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}
