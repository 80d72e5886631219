package backfill

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
)

// SpecField is one field of a partition spec: a transform of a source
// column ("identity", "bucket[16]", ...).
type SpecField struct {
	Source    string
	Transform string
}

// DescribeSpec renders a spec for messages: "identity(date), bucket[16](user_id)".
func DescribeSpec(spec []SpecField) string {
	if len(spec) == 0 {
		return "unpartitioned"
	}
	parts := make([]string, len(spec))
	for i, f := range spec {
		parts[i] = fmt.Sprintf("%s(%s)", f.Transform, f.Source)
	}
	return strings.Join(parts, ", ")
}

// Sources are the source columns of a spec, in order, without repeats.
func Sources(spec []SpecField) []string {
	var out []string
	for _, f := range spec {
		if !slices.Contains(out, f.Source) {
			out = append(out, f.Source)
		}
	}
	return out
}

// PrimaryKey is a table's key: its identifier fields.
func PrimaryKey(table string, schema *iceberg.Schema) ([]string, error) {
	var key []string
	for _, id := range schema.IdentifierFieldIDs {
		name, ok := schema.FindColumnName(id)
		if !ok {
			return nil, fmt.Errorf("table %s: identifier field %d is not in its schema", table, id)
		}
		key = append(key, name)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("table %s has no primary key (Iceberg identifier fields): the backfill needs one to join staged features back row by row", table)
	}
	return key, nil
}

// StageCheck is what stage 1 needs to know about its inputs to check them.
type StageCheck struct {
	Training, Feature             string // table names, for messages
	TrainingSchema, FeatureSchema *iceberg.Schema
	TrainingSpec                  []SpecField
	Keys                          []string // entity key columns, in both tables
	Alignment                     Alignment
	DateColumn                    string   // date column of both tables (SameDay, PreviousDay)
	EventTimeColumn               string   // training event time (AsOf)
	FeatureTimeColumn             string   // feature row time (AsOf)
	Features                      []string // feature columns to stage; empty: every other column
	Prefix                        string   // prepended to staged feature column names
}

// StagePlan is a checked stage-1 job: the training columns to read, and
// the feature columns to take and what they are called when staged.
type StagePlan struct {
	PrimaryKey    []string // training table's key
	CarryColumns  []string // training columns copied to the staging table: key, then partition sources
	ReadColumns   []string // training columns read: CarryColumns, entity keys and the alignment's time column
	FeatureSource []string // feature table columns taken
	FeatureNames  []string // their names in the staging table
}

// Check validates a stage-1 job and resolves its columns. Every error
// names the table, the column and what is wrong.
func (c StageCheck) Check() (StagePlan, error) {
	var p StagePlan
	if len(c.Keys) == 0 {
		return p, fmt.Errorf("no entity key columns given (keys)")
	}
	pk, err := PrimaryKey(c.Training, c.TrainingSchema)
	if err != nil {
		return p, err
	}
	p.PrimaryKey = pk
	p.CarryColumns = append(p.CarryColumns, pk...)
	for _, s := range Sources(c.TrainingSpec) {
		if !slices.Contains(p.CarryColumns, s) {
			p.CarryColumns = append(p.CarryColumns, s)
		}
	}
	for _, k := range c.Keys {
		if err := sameColumn(k, c.Training, c.TrainingSchema, c.Feature, c.FeatureSchema); err != nil {
			return p, fmt.Errorf("entity key: %w", err)
		}
	}
	timeCols := map[string]bool{}
	if c.Alignment.UsesDate() {
		if err := wantType(c.Training, c.TrainingSchema, c.DateColumn, "date column", isDate); err != nil {
			return p, err
		}
		if err := wantType(c.Feature, c.FeatureSchema, c.DateColumn, "date column", isDate); err != nil {
			return p, err
		}
		timeCols[c.DateColumn] = true
	} else {
		if err := wantType(c.Training, c.TrainingSchema, c.EventTimeColumn, "event time column", isTimestamp); err != nil {
			return p, err
		}
		if err := wantType(c.Feature, c.FeatureSchema, c.FeatureTimeColumn, "feature time column", isTimestamp); err != nil {
			return p, err
		}
		timeCols[c.FeatureTimeColumn] = true
	}
	p.ReadColumns = slices.Clone(p.CarryColumns)
	for _, col := range append(slices.Clone(c.Keys), c.timeColumn()) {
		if !slices.Contains(p.ReadColumns, col) {
			p.ReadColumns = append(p.ReadColumns, col)
		}
	}

	// Feature columns: the ones asked for, or every column of the feature
	// table that is not a key or a time column (the date column is never a
	// feature, whatever the alignment).
	features := c.Features
	if len(features) == 0 {
		for _, f := range c.FeatureSchema.Fields() {
			if slices.Contains(c.Keys, f.Name) || timeCols[f.Name] || f.Name == c.DateColumn || f.Name == c.FeatureTimeColumn {
				continue
			}
			features = append(features, f.Name)
		}
		if len(features) == 0 {
			return p, fmt.Errorf("feature table %s has no feature columns besides its keys and time columns", c.Feature)
		}
	}
	seen := map[string]bool{}
	for _, f := range features {
		if _, ok := c.FeatureSchema.FindFieldByName(f); !ok {
			return p, fmt.Errorf("feature column %s is not in feature table %s", f, c.Feature)
		}
		if slices.Contains(c.Keys, f) {
			return p, fmt.Errorf("feature column %s is an entity key of %s, not a feature", f, c.Feature)
		}
		name := c.Prefix + f
		if seen[name] {
			return p, fmt.Errorf("feature column %s is listed twice", f)
		}
		seen[name] = true
		if slices.Contains(p.CarryColumns, name) {
			return p, fmt.Errorf("feature column %s would be staged as %s, which is a key or partition column of training table %s: set a prefix", f, name, c.Training)
		}
		p.FeatureSource = append(p.FeatureSource, f)
		p.FeatureNames = append(p.FeatureNames, name)
	}
	return p, nil
}

func (c StageCheck) timeColumn() string {
	if c.Alignment.UsesDate() {
		return c.DateColumn
	}
	return c.EventTimeColumn
}

// sameColumn checks a column exists in both tables with the same type.
func sameColumn(col, aName string, a *iceberg.Schema, bName string, b *iceberg.Schema) error {
	fa, ok := a.FindFieldByName(col)
	if !ok {
		return fmt.Errorf("column %s is not in table %s", col, aName)
	}
	fb, ok := b.FindFieldByName(col)
	if !ok {
		return fmt.Errorf("column %s is not in table %s", col, bName)
	}
	if !SameType(fa.Type, fb.Type) {
		return fmt.Errorf("column %s is %s in table %s but %s in table %s", col, fa.Type, aName, fb.Type, bName)
	}
	return nil
}

func wantType(tbl string, s *iceberg.Schema, col, what string, ok func(iceberg.Type) bool) error {
	if col == "" {
		return fmt.Errorf("no %s given for table %s", what, tbl)
	}
	f, found := s.FindFieldByName(col)
	if !found {
		return fmt.Errorf("%s %s is not in table %s", what, col, tbl)
	}
	if !ok(f.Type) {
		return fmt.Errorf("%s %s of table %s is %s, which does not fit", what, col, tbl, f.Type)
	}
	return nil
}

func isDate(t iceberg.Type) bool {
	_, ok := t.(iceberg.DateType)
	return ok
}

func isTimestamp(t iceberg.Type) bool {
	switch t.(type) {
	case iceberg.TimestampType, iceberg.TimestampTzType, iceberg.TimestampNsType, iceberg.TimestampTzNsType:
		return true
	}
	return false
}

// Staging describes a staging table for the promotion checks.
type Staging struct {
	Name   string
	Schema *iceberg.Schema
	Spec   []SpecField
}

// PromoteCheck is what stage 2 needs to know about its inputs to check them.
type PromoteCheck struct {
	Training       string
	TrainingSchema *iceberg.Schema
	TrainingSpec   []SpecField
	Staging        []Staging
	// Promoted are the columns earlier promotions added to the training
	// table. Only those may be replaced; any other existing column (the
	// label, say) is never overwritten by a feature of the same name.
	Promoted []string
}

// PromoteColumn is a feature column a promotion writes into the training
// table.
type PromoteColumn struct {
	Name     string
	Type     iceberg.Type
	Staging  int  // index of the staging table it comes from
	Existing bool // the training table has it already (same type): its values are replaced
}

// PromotePlan is a checked promotion: the key it joins on, the bucket
// column, and the columns it writes.
type PromotePlan struct {
	PrimaryKey   []string
	BucketColumn string
	Buckets      int
	Columns      []PromoteColumn
}

// Check validates a promotion. A staging table must be partitioned like
// the training table (the join works partition by partition and bucket by
// bucket), hold its primary key with the same types, and bring feature
// columns that no other staging table brings and that, if the training
// table has them already, have the same type.
func (c PromoteCheck) Check() (PromotePlan, error) {
	var p PromotePlan
	if len(c.Staging) == 0 {
		return p, fmt.Errorf("no staging tables given")
	}
	pk, err := PrimaryKey(c.Training, c.TrainingSchema)
	if err != nil {
		return p, err
	}
	p.PrimaryKey = pk
	for _, f := range c.TrainingSpec {
		var n int
		if _, err := fmt.Sscanf(f.Transform, "bucket[%d]", &n); err == nil {
			p.BucketColumn, p.Buckets = f.Source, n
			break
		}
	}
	if p.BucketColumn == "" {
		return p, fmt.Errorf("training table %s is partitioned by %s: a bucketed promotion needs a bucket partition", c.Training, DescribeSpec(c.TrainingSpec))
	}
	structural := slices.Clone(pk)
	for _, s := range Sources(c.TrainingSpec) {
		if !slices.Contains(structural, s) {
			structural = append(structural, s)
		}
	}
	from := map[string]string{}
	for i, st := range c.Staging {
		if !sameSpec(st.Spec, c.TrainingSpec) {
			return p, fmt.Errorf("staging table %s is partitioned by %s but training table %s by %s: they must match for a bucket-by-bucket join",
				st.Name, DescribeSpec(st.Spec), c.Training, DescribeSpec(c.TrainingSpec))
		}
		for _, col := range structural {
			if err := sameColumn(col, c.Training, c.TrainingSchema, st.Name, st.Schema); err != nil {
				return p, fmt.Errorf("staging table %s: key or partition %w", st.Name, err)
			}
		}
		n := 0
		for _, f := range st.Schema.Fields() {
			if slices.Contains(structural, f.Name) {
				continue
			}
			n++
			if other, dup := from[f.Name]; dup {
				return p, fmt.Errorf("feature column %s is in both staging tables %s and %s", f.Name, other, st.Name)
			}
			from[f.Name] = st.Name
			col := PromoteColumn{Name: f.Name, Type: f.Type, Staging: i}
			if tf, ok := c.TrainingSchema.FindFieldByName(f.Name); ok {
				if !slices.Contains(c.Promoted, f.Name) {
					return p, fmt.Errorf("feature column %s of staging table %s would overwrite column %s of training table %s, which no promotion added: rename the feature (prefix)", f.Name, st.Name, f.Name, c.Training)
				}
				if !SameType(tf.Type, f.Type) {
					return p, fmt.Errorf("feature column %s is %s in staging table %s but %s in training table %s", f.Name, f.Type, st.Name, tf.Type, c.Training)
				}
				col.Existing = true
			}
			p.Columns = append(p.Columns, col)
		}
		if n == 0 {
			return p, fmt.Errorf("staging table %s has no feature columns", st.Name)
		}
	}
	return p, nil
}

func sameSpec(a, b []SpecField) bool {
	return slices.Equal(a, b)
}

// SameType reports whether two column types hold the same values. Unlike
// iceberg's Type.Equals it ignores the ids of nested fields (list elements,
// map keys and values, struct fields): every table numbers its own fields,
// so the same list<long> column has different element ids in a staging table
// and in the training table it was promoted into.
func SameType(a, b iceberg.Type) bool {
	switch a := a.(type) {
	case *iceberg.ListType:
		b, ok := b.(*iceberg.ListType)
		return ok && a.ElementRequired == b.ElementRequired && SameType(a.Element, b.Element)
	case *iceberg.MapType:
		b, ok := b.(*iceberg.MapType)
		return ok && a.ValueRequired == b.ValueRequired &&
			SameType(a.KeyType, b.KeyType) && SameType(a.ValueType, b.ValueType)
	case *iceberg.StructType:
		b, ok := b.(*iceberg.StructType)
		if !ok || len(a.FieldList) != len(b.FieldList) {
			return false
		}
		for i, fa := range a.FieldList {
			fb := b.FieldList[i]
			if fa.Name != fb.Name || fa.Required != fb.Required || !SameType(fa.Type, fb.Type) {
				return false
			}
		}
		return true
	default:
		return a.Equals(b)
	}
}
