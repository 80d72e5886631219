package demodata

import (
	"fmt"
	"math"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// Tables names the demo tables.
type Tables struct {
	Training string
	Users    string
	Ads      string
	// Signals and Noise are the feature experiment's groups, keyed by
	// user_id: Signals holds the label model's user inputs as it reads them
	// (informative; names ml.training never gets from ctr-retrain), Noise
	// pure noise ("": not written, so callers that name their own three
	// tables keep getting just those).
	Signals string
	Noise   string
}

// DefaultTables are the demo's table names.
var DefaultTables = Tables{Training: "ml.training", Users: "features.user_daily", Ads: "features.ad_daily", Signals: "features.user_signals", Noise: "features.noise_daily"}

var (
	userFeatureNames = []string{"activity", "ctr_7d", "sessions", "recency_days", "click_rate_day", "recent_ads"}
	adFeatureNames   = []string{"ad_quality", "ad_ctr_7d", "ad_age_days"}
	// SignalFeatureNames are features.user_signals' columns: log(activity),
	// logit(ctr_7d) and recency_days/30 of features.user_daily, the terms
	// of DefaultModel's logit, so a linear model needs no transforms.
	SignalFeatureNames = []string{"log_activity", "logit_ctr_7d", "recency"}
	// NoiseFeatureNames are features.noise_daily's columns: standard
	// normal draws per user and day that the label model never reads.
	NoiseFeatureNames = []string{"noise_a", "noise_b"}
)

func isFeature(name string) bool {
	return slices.Contains(userFeatureNames, name) || slices.Contains(adFeatureNames, name)
}

// TrainingSchema is ml.training: one row per impression, keyed by
// request_id.
func TrainingSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "request_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 3, Name: "ad_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 4, Name: "event_ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 5, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
		iceberg.NestedField{ID: 6, Name: "label", Type: iceberg.PrimitiveTypes.Int32, Required: true},
	)
}

// TrainingSpec partitions ml.training by date and bucket(n, user_id), and
// (unless unsorted) sorts each file by user then time.
func TrainingSpec(buckets int, unsorted bool) lake.TableSpec {
	spec := iceberg.NewPartitionSpec(
		iceberg.PartitionField{SourceIDs: []int{5}, FieldID: 1000, Name: "date", Transform: iceberg.IdentityTransform{}},
		iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1001, Name: "user_id_bucket", Transform: iceberg.BucketTransform{NumBuckets: buckets}},
	)
	ts := lake.TableSpec{Partition: &spec}
	if !unsorted {
		order, err := table.NewSortOrder(1, []table.SortField{
			{SourceIDs: []int{2}, Transform: iceberg.IdentityTransform{}, Direction: table.SortASC, NullOrder: table.NullsFirst},
			{SourceIDs: []int{4}, Transform: iceberg.IdentityTransform{}, Direction: table.SortASC, NullOrder: table.NullsFirst},
		})
		if err != nil {
			panic(err) // a constant order; caught by tests
		}
		ts.SortOrder = &order
	}
	return ts
}

// UserSchema is features.user_daily: one row per user and day, stamped
// (ts) with when it was published: some time in the first PublishWindow
// of the next day, once the day's aggregates are known.
func UserSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1, 2},
		iceberg.NestedField{ID: 1, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
		iceberg.NestedField{ID: 3, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 4, Name: "activity", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 5, Name: "ctr_7d", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 6, Name: "sessions", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 7, Name: "recency_days", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 8, Name: "click_rate_day", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 9, Name: "recent_ads", Type: &iceberg.ListType{ElementID: 10, Element: iceberg.PrimitiveTypes.Int64, ElementRequired: true}},
	)
}

// AdSchema is features.ad_daily.
func AdSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(0, []int{1, 2},
		iceberg.NestedField{ID: 1, Name: "ad_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
		iceberg.NestedField{ID: 3, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		iceberg.NestedField{ID: 4, Name: "ad_quality", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 5, Name: "ad_ctr_7d", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 6, Name: "ad_age_days", Type: iceberg.PrimitiveTypes.Float64},
	)
}

// UserFloatsSchema is a daily user feature group of float columns:
// features.user_signals and features.noise_daily, laid out alike so that a
// pipeline staging one stages the other with the same keys.
func UserFloatsSchema(columns []string) *iceberg.Schema {
	fields := []iceberg.NestedField{
		{ID: 1, Name: "user_id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: 2, Name: "date", Type: iceberg.PrimitiveTypes.Date, Required: true},
		{ID: 3, Name: "ts", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
	}
	for i, c := range columns {
		fields = append(fields, iceberg.NestedField{ID: 4 + i, Name: c, Type: iceberg.PrimitiveTypes.Float64})
	}
	return iceberg.NewSchemaWithIdentifiers(0, []int{1, 2}, fields...)
}

// FeatureSpec partitions a daily feature table by date, sorted by key.
func FeatureSpec() lake.TableSpec {
	spec := iceberg.NewPartitionSpec(
		iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "date", Transform: iceberg.IdentityTransform{}},
	)
	order, err := table.NewSortOrder(1, []table.SortField{
		{SourceIDs: []int{1}, Transform: iceberg.IdentityTransform{}, Direction: table.SortASC, NullOrder: table.NullsFirst},
	})
	if err != nil {
		panic(err)
	}
	return lake.TableSpec{Partition: &spec, SortOrder: &order}
}

// recordBuilder fills a record of a table's Arrow schema column by name.
type recordBuilder struct {
	b      *array.RecordBuilder
	schema *arrow.Schema
}

func newRecordBuilder(mem memory.Allocator, schema *arrow.Schema) *recordBuilder {
	return &recordBuilder{b: array.NewRecordBuilder(mem, schema), schema: schema}
}

func (r *recordBuilder) field(name string) array.Builder {
	idx := r.schema.FieldIndices(name)
	if len(idx) != 1 {
		panic(fmt.Sprintf("demodata: column %s not in schema %s", name, r.schema))
	}
	return r.b.Field(idx[0])
}

func (r *recordBuilder) int64s(name string, vals []int64) {
	r.field(name).(*array.Int64Builder).AppendValues(vals, nil)
}

func (r *recordBuilder) int32s(name string, vals []int32) {
	r.field(name).(*array.Int32Builder).AppendValues(vals, nil)
}

func (r *recordBuilder) dates(name string, d int32, n int) {
	b := r.field(name).(*array.Date32Builder)
	for range n {
		b.Append(arrow.Date32(d))
	}
}

func (r *recordBuilder) stamps(name string, vals []int64) {
	b := r.field(name).(*array.TimestampBuilder)
	for _, v := range vals {
		b.Append(arrow.Timestamp(v))
	}
}

// floats appends a float column, NaN as null, applying a deliberate break
// if this is the broken feature.
func (r *recordBuilder) floats(name string, vals []float64, broken Broken, g *Generator, day uint64) {
	b := r.field(name).(*array.Float64Builder)
	for i, v := range vals {
		if broken.Feature == name {
			switch broken.Mode {
			case "nulls":
				b.AppendNull()
				continue
			case "constant":
				v = 1
			case "garbage":
				v = (g.uniform(streamBroken, day, uint64(i)) - 0.5) * 1e12
			}
		}
		if math.IsNaN(v) {
			b.AppendNull()
		} else {
			b.Append(v)
		}
	}
}

func (r *recordBuilder) lists(name string, vals [][]int64, broken Broken) {
	b := r.field(name).(*array.ListBuilder)
	vb := b.ValueBuilder().(*array.Int64Builder)
	for _, v := range vals {
		if broken.Feature == name {
			b.AppendNull()
			continue
		}
		b.Append(true)
		vb.AppendValues(v, nil)
	}
}

func (r *recordBuilder) record() arrow.RecordBatch { return r.b.NewRecordBatch() }

func (r *recordBuilder) release() { r.b.Release() }
