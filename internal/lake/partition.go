package lake

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Partition is the set of data files of one partition of a table, as a
// scan plans them.
type Partition struct {
	// Key identifies the partition by source column, transform and value,
	// so partitions of two tables with the same spec over the same columns
	// have the same key whatever their field ids.
	Key    string
	Values map[string]int64 // source column name -> partition value (days for dates, bucket numbers)
	Tasks  []table.FileScanTask
	Rows   int64
}

// PartitionField is one field of a partition spec, by source column.
type PartitionField struct {
	Source    string // source column name
	Transform string // e.g. "identity", "bucket[16]"
	Name      string // partition field name
	FieldID   int
}

// SpecFields describes a partition spec by source column names.
func SpecFields(schema *iceberg.Schema, spec iceberg.PartitionSpec) ([]PartitionField, error) {
	var out []PartitionField
	for _, f := range spec.Fields() {
		src, ok := schema.FindColumnName(f.SourceID())
		if !ok {
			return nil, fmt.Errorf("partition field %s: source column %d not in the schema", f.Name, f.SourceID())
		}
		out = append(out, PartitionField{Source: src, Transform: f.Transform.String(), Name: f.Name, FieldID: f.FieldID})
	}
	return out, nil
}

// SameSpec reports whether two specs partition the same way: the same
// transforms of the same source columns, in the same order.
func SameSpec(a, b []PartitionField) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Source != b[i].Source || a[i].Transform != b[i].Transform {
			return false
		}
	}
	return true
}

// DescribeSpec is a spec in words, for messages: "identity(date), bucket[16](user_id)".
func DescribeSpec(fields []PartitionField) string {
	if len(fields) == 0 {
		return "unpartitioned"
	}
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = fmt.Sprintf("%s(%s)", f.Transform, f.Source)
	}
	return strings.Join(parts, ", ")
}

// BucketSpec finds the bucket transform of a spec: its source column and
// bucket count. ok is false for a spec without one.
func BucketSpec(fields []PartitionField) (source string, n int, ok bool) {
	for _, f := range fields {
		var k int
		if _, err := fmt.Sscanf(f.Transform, "bucket[%d]", &k); err == nil {
			return f.Source, k, true
		}
	}
	return "", 0, false
}

// partitionValues converts a data file's partition tuple to values by
// source column.
func partitionValues(fields []PartitionField, data map[int]any) (map[string]int64, string, error) {
	vals := make(map[string]int64, len(fields))
	parts := make([]string, len(fields))
	for i, f := range fields {
		v, ok := data[f.FieldID]
		if !ok || v == nil {
			parts[i] = fmt.Sprintf("%s:%s=null", f.Source, f.Transform)
			continue
		}
		n, err := asInt64(v)
		if err != nil {
			return nil, "", fmt.Errorf("partition field %s: %w", f.Name, err)
		}
		vals[f.Source] = n
		parts[i] = fmt.Sprintf("%s:%s=%d", f.Source, f.Transform, n)
	}
	return vals, strings.Join(parts, "/"), nil
}

func asInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case iceberg.Date:
		return int64(x), nil
	case iceberg.Timestamp:
		return int64(x), nil
	case iceberg.Time:
		return int64(x), nil
	default:
		return 0, fmt.Errorf("unsupported partition value %v (%T): only integer, date and time partitions are supported", v, v)
	}
}

// PlanPartitions plans a scan and groups its files by partition, sorted by
// key. Every file must be of the table's current spec.
func PlanPartitions(ctx context.Context, tbl *table.Table, scan *table.Scan) ([]Partition, error) {
	fields, err := SpecFields(tbl.Schema(), tbl.Spec())
	if err != nil {
		return nil, err
	}
	tasks, err := scan.PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan files: %w", err)
	}
	byKey := map[string]*Partition{}
	spec := tbl.Spec()
	specID := int32(spec.ID())
	for _, t := range tasks {
		if t.File.SpecID() != specID {
			return nil, fmt.Errorf("file %s has partition spec %d, table's is %d: partition evolution is not supported here", t.File.FilePath(), t.File.SpecID(), specID)
		}
		vals, key, err := partitionValues(fields, t.File.Partition())
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", t.File.FilePath(), err)
		}
		p, ok := byKey[key]
		if !ok {
			p = &Partition{Key: key, Values: vals}
			byKey[key] = p
		}
		p.Tasks = append(p.Tasks, t)
		p.Rows += t.File.Count()
	}
	out := make([]Partition, 0, len(byKey))
	for _, p := range byKey {
		// File order within a partition: by path, so reads are repeatable.
		sort.Slice(p.Tasks, func(i, j int) bool { return p.Tasks[i].File.FilePath() < p.Tasks[j].File.FilePath() })
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// PartitionKey is the key of a data file's partition (see Partition.Key).
func PartitionKey(tbl *table.Table, df iceberg.DataFile) (string, error) {
	spec := tbl.Metadata().PartitionSpecByID(int(df.SpecID()))
	if spec == nil {
		return "", fmt.Errorf("file %s: unknown partition spec %d", df.FilePath(), df.SpecID())
	}
	fields, err := SpecFields(tbl.Schema(), *spec)
	if err != nil {
		return "", err
	}
	_, key, err := partitionValues(fields, df.Partition())
	return key, err
}

// DateRange returns the filter start <= col <= end on a date column, with
// dates as days since the Unix epoch.
func DateRange(col string, start, end int32) iceberg.BooleanExpression {
	return iceberg.NewAnd(
		iceberg.GreaterThanEqual(iceberg.Reference(col), iceberg.Date(start)),
		iceberg.LessThanEqual(iceberg.Reference(col), iceberg.Date(end)))
}
