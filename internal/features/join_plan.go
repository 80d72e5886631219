package features

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

// JoinSpec is one staging table joined onto the training rows at read
// time, instead of being promoted into the training table first.
type JoinSpec struct {
	Table    string   // the staging table
	Snapshot int64    // the staging snapshot to read; 0: the current one
	Columns  []string // staging columns to bring; default every feature column
	Prefix   string   // prepended to the brought columns' names
	// Keys maps a training column (primary key or partition source) to
	// the staging table's name for it, where the two differ.
	Keys map[string]string
}

// Join modes: how a training partition finds its staging rows.
const (
	JoinBucket  = "bucket"  // same bucket count: bucket b on both sides
	JoinDivides = "divides" // one count divides the other: b of the larger, b mod m of the smaller
	JoinHash    = "hash"    // counts share no such relation: a hash join over the staging date
)

// JoinedColumn says where a column the join brings came from.
type JoinedColumn struct {
	Name     string `json:"name"`   // as the split sees it (prefixed)
	Source   string `json:"source"` // as the staging table names it
	Table    string `json:"table"`
	Snapshot int64  `json:"snapshot_id,string"`
}

// JoinSide is a checked staging table of a join.
type JoinSide struct {
	Spec     JoinSpec
	Snapshot int64 // resolved: 0 only when the staging table has no data
	Mode     string
	Buckets  int
	table    *table.Table
	keys     []string          // staging names of the training primary key, in key order
	cols     []string          // staging columns read
	names    []string          // their output names
	rename   map[string]string // staging partition source -> training name
	fields   []arrow.Field     // output fields
	parts    map[partKey][]lake.Partition
	partRows map[partKey]int64
}

// partKey is a partition by date and bucket.
type partKey struct{ date, bucket int64 }

// Join is a checked, planned read of a training table's date window at a
// pinned snapshot with staging tables joined on the fly.
type Join struct {
	Training   string
	Snapshot   int64
	DateColumn string
	Window     backfill.DateRange
	Sides      []*JoinSide
	training   *table.Table
	pk         []string
	bucketCol  string
	buckets    int
}

// PlanJoin checks the staging tables of a join against the training
// table (at its pinned snapshot) and plans which staging files each
// training partition reads. Everything wrong with the inputs (a missing
// table, snapshot, key or column, a key of another type, a staging table
// partitioned otherwise, a column name clash) is a BadInputError, found
// before anything is read or written.
func PlanJoin(ctx context.Context, cat *lake.Catalog, training *table.Table, snap int64, dateCol string, window backfill.DateRange, specs []JoinSpec) (*Join, error) {
	j := &Join{Training: lake.Name(training.Identifier()), Snapshot: snap, DateColumn: dateCol, Window: window, training: training}
	schema := training.Schema()
	if s := training.Metadata().SnapshotByID(snap); s != nil && s.SchemaID != nil {
		for _, sc := range training.Metadata().Schemas() {
			if sc.ID == *s.SchemaID {
				schema = sc
			}
		}
	}
	var err error
	if j.pk, err = backfill.PrimaryKey(j.Training, schema); err != nil {
		return nil, badInput("%v", err)
	}
	tspec, err := lake.SpecFields(schema, training.Spec())
	if err != nil {
		return nil, err
	}
	col, n, ok := lake.BucketSpec(tspec)
	if !ok {
		return nil, badInput("training table %s is partitioned by %s: a bucket join needs a bucket partition", j.Training, lake.DescribeSpec(tspec))
	}
	j.bucketCol, j.buckets = col, n
	taken := map[string]string{}
	for _, f := range schema.Fields() {
		taken[f.Name] = "training table " + j.Training
	}
	for _, spec := range specs {
		side, err := j.checkSide(ctx, cat, schema, tspec, spec, taken)
		if err != nil {
			return nil, err
		}
		j.Sides = append(j.Sides, side)
	}
	return j, nil
}

// checkSide loads and checks one staging table of a join.
func (j *Join) checkSide(ctx context.Context, cat *lake.Catalog, schema *iceberg.Schema, tspec []lake.PartitionField, spec JoinSpec, taken map[string]string) (*JoinSide, error) {
	if spec.Table == j.Training {
		return nil, badInput("join: staging table %s is the training table", spec.Table)
	}
	st, err := loadInput(ctx, cat, "staging table", spec.Table)
	if err != nil {
		return nil, err
	}
	side := &JoinSide{Spec: spec, table: st, Snapshot: spec.Snapshot, rename: map[string]string{}}
	switch {
	case spec.Snapshot != 0 && st.Metadata().SnapshotByID(spec.Snapshot) == nil:
		return nil, badInput("join: staging table %s has no snapshot %d", spec.Table, spec.Snapshot)
	case spec.Snapshot == 0 && st.CurrentSnapshot() != nil:
		side.Snapshot = st.CurrentSnapshot().SnapshotID
	}
	sschema := st.Schema()
	if s := st.Metadata().SnapshotByID(side.Snapshot); s != nil && s.SchemaID != nil {
		for _, sc := range st.Metadata().Schemas() {
			if sc.ID == *s.SchemaID {
				sschema = sc
			}
		}
	}
	// Structural columns: the training key and partition sources, each
	// under its staging name.
	structural := slices.Clone(j.pk)
	for _, f := range tspec {
		if !slices.Contains(structural, f.Source) {
			structural = append(structural, f.Source)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Keys)) {
		if !slices.Contains(structural, k) {
			return nil, badInput("join %s: keys maps %s, which is not a key or partition column of training table %s (those are %s)",
				spec.Table, k, j.Training, strings.Join(structural, ", "))
		}
	}
	stagingName := func(c string) string {
		if s, ok := spec.Keys[c]; ok && s != "" {
			return s
		}
		return c
	}
	for _, c := range structural {
		sc := stagingName(c)
		tf, _ := schema.FindFieldByName(c)
		sf, ok := sschema.FindFieldByName(sc)
		if !ok {
			hint := ""
			if sc == c {
				hint = fmt.Sprintf(" (if it names it otherwise, map it: keys: {%s: NAME})", c)
			}
			return nil, badInput("join: staging table %s has no column %s, the training table's %s%s", spec.Table, sc, c, hint)
		}
		if !backfill.SameType(tf.Type, sf.Type) {
			return nil, badInput("join: column %s is %s in staging table %s but %s (%s) in training table %s", sc, sf.Type, spec.Table, c, tf.Type, j.Training)
		}
		side.rename[sc] = c
	}
	for _, c := range j.pk {
		side.keys = append(side.keys, stagingName(c))
	}
	if err := j.checkSpec(side, tspec); err != nil {
		return nil, err
	}
	// The columns it brings.
	isStructural := func(name string) bool { _, ok := side.rename[name]; return ok }
	cols := spec.Columns
	if len(cols) == 0 {
		for _, f := range sschema.Fields() {
			if !isStructural(f.Name) {
				cols = append(cols, f.Name)
			}
		}
		if len(cols) == 0 {
			return nil, badInput("join: staging table %s has no feature columns", spec.Table)
		}
	}
	arrowSchema, err := table.SchemaToArrowSchema(sschema, nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("staging table %s: %w", spec.Table, err)
	}
	for _, c := range cols {
		switch {
		case isStructural(c):
			return nil, badInput("join: column %s of staging table %s is a key or partition column, not a feature to join", c, spec.Table)
		case slices.Contains(side.cols, c):
			return nil, badInput("join: column %s of staging table %s is listed twice", c, spec.Table)
		}
		fs, ok := arrowSchema.FieldsByName(c)
		if !ok || len(fs) == 0 {
			return nil, badInput("join: staging table %s has no column %s", spec.Table, c)
		}
		name := spec.Prefix + c
		if other, dup := taken[name]; dup {
			return nil, badInput("join: column %s of staging table %s would be %s, which %s has already: give a prefix", c, spec.Table, name, other)
		}
		taken[name] = "staging table " + spec.Table
		f := fs[0]
		f.Name, f.Nullable = name, true // a training row without a staged row gets null
		side.cols, side.names, side.fields = append(side.cols, c), append(side.names, name), append(side.fields, f)
	}
	return side, nil
}

// checkSpec checks a staging table is partitioned like the training table
// (the same transforms of the same columns, bucket counts aside) and picks
// how its buckets meet the training table's.
func (j *Join) checkSpec(side *JoinSide, tspec []lake.PartitionField) error {
	sspec, err := lake.SpecFields(side.table.Schema(), side.table.Spec())
	if err != nil {
		return err
	}
	bad := func() error {
		return badInput("join: staging table %s is partitioned by %s but training table %s by %s: the join needs the same partitions (only the bucket count may differ)",
			side.Spec.Table, lake.DescribeSpec(sspec), j.Training, lake.DescribeSpec(tspec))
	}
	if len(sspec) != len(tspec) {
		return bad()
	}
	for i, tf := range tspec {
		sf := sspec[i]
		if side.rename[sf.Source] != tf.Source {
			return bad()
		}
		if tf.Transform == sf.Transform {
			continue
		}
		var a, b int
		if _, err := fmt.Sscanf(tf.Transform, "bucket[%d]", &a); err != nil {
			return bad()
		}
		if _, err := fmt.Sscanf(sf.Transform, "bucket[%d]", &b); err != nil {
			return bad()
		}
	}
	_, side.Buckets, _ = lake.BucketSpec(sspec)
	switch n, m := j.buckets, side.Buckets; {
	case n == m:
		side.Mode = JoinBucket
	case n%m == 0 || m%n == 0:
		side.Mode = JoinDivides
	default:
		side.Mode = JoinHash
	}
	return nil
}

// Columns lists the joined columns and where each came from.
func (j *Join) Columns() []JoinedColumn {
	var out []JoinedColumn
	for _, s := range j.Sides {
		for i, c := range s.cols {
			out = append(out, JoinedColumn{Name: s.names[i], Source: c, Table: s.Spec.Table, Snapshot: s.Snapshot})
		}
	}
	return out
}

// Fields are the joined columns' Arrow fields, after the training
// table's own.
func (j *Join) Fields() []arrow.Field {
	var out []arrow.Field
	for _, s := range j.Sides {
		out = append(out, s.fields...)
	}
	return out
}

// Summary says in words how each staging table was joined, for the
// node's summary: the bucket counts, and a fallback hash join if any.
func (j *Join) Summary() string {
	var parts []string
	for _, s := range j.Sides {
		switch s.Mode {
		case JoinBucket:
			parts = append(parts, fmt.Sprintf("%s@%d bucket join (%d buckets)", s.Spec.Table, s.Snapshot, s.Buckets))
		case JoinDivides:
			parts = append(parts, fmt.Sprintf("%s@%d bucket join (%d vs %d buckets)", s.Spec.Table, s.Snapshot, j.buckets, s.Buckets))
		default:
			parts = append(parts, fmt.Sprintf("%s@%d fallback hash join by date (%d vs %d buckets: neither divides the other)", s.Spec.Table, s.Snapshot, j.buckets, s.Buckets))
		}
	}
	return "joined " + strings.Join(parts, ", ")
}

// Keep drops the joined columns not in need, so that a split reads only
// the staging columns it uses; a staging table none of whose columns are
// needed is not read at all.
func (j *Join) Keep(need []string) {
	sides := j.Sides[:0]
	for _, s := range j.Sides {
		var cols, names []string
		var fields []arrow.Field
		for i, n := range s.names {
			if slices.Contains(need, n) {
				cols, names, fields = append(cols, s.cols[i]), append(names, n), append(fields, s.fields[i])
			}
		}
		s.cols, s.names, s.fields = cols, names, fields
		if len(cols) > 0 {
			sides = append(sides, s)
		}
	}
	j.Sides = sides
}
