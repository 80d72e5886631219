package lakeimport

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
)

// PartitionField is one entry of --partition-by: a source column and the
// transform that derives the partition value from it.
type PartitionField struct {
	Column    string
	Transform iceberg.Transform
}

// ParsePartitionBy reads a --partition-by list such as
// "date,bucket(16,user_id),day(event_ts),truncate(4,country)". A bare
// column is an identity partition; the transforms are Iceberg's: bucket(N,
// col), truncate(W, col), year/month/day/hour(col) and identity(col).
func ParsePartitionBy(s string) ([]PartitionField, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []PartitionField
	seen := map[string]bool{}
	for _, item := range splitTop(s) {
		item = strings.TrimSpace(item)
		f, err := parseField(item)
		if err != nil {
			return nil, fmt.Errorf("partition-by %q: %w", item, err)
		}
		key := f.Column + "/" + f.Transform.String()
		if seen[key] {
			return nil, fmt.Errorf("partition-by %q: listed twice", item)
		}
		seen[key] = true
		out = append(out, f)
	}
	return out, nil
}

// splitTop splits at commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseField(item string) (PartitionField, error) {
	if item == "" {
		return PartitionField{}, fmt.Errorf("empty entry")
	}
	open := strings.IndexByte(item, '(')
	if open < 0 {
		if err := checkColumn(item); err != nil {
			return PartitionField{}, err
		}
		return PartitionField{Column: item, Transform: iceberg.IdentityTransform{}}, nil
	}
	if !strings.HasSuffix(item, ")") {
		return PartitionField{}, fmt.Errorf("want NAME(ARGS), missing the closing parenthesis")
	}
	name := strings.ToLower(strings.TrimSpace(item[:open]))
	args := strings.Split(item[open+1:len(item)-1], ",")
	for i := range args {
		args[i] = strings.TrimSpace(args[i])
	}
	switch name {
	case "identity", "year", "month", "day", "hour":
		if len(args) != 1 {
			return PartitionField{}, fmt.Errorf("%s takes one column, got %d arguments", name, len(args))
		}
		if err := checkColumn(args[0]); err != nil {
			return PartitionField{}, err
		}
		t, err := iceberg.ParseTransform(name)
		if err != nil {
			return PartitionField{}, err
		}
		return PartitionField{Column: args[0], Transform: t}, nil
	case "bucket", "truncate":
		if len(args) != 2 {
			return PartitionField{}, fmt.Errorf("%s takes a number and a column, as %s(16,user_id)", name, name)
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n <= 0 || n > 1<<20 {
			return PartitionField{}, fmt.Errorf("%s: %q is not a count between 1 and %d", name, args[0], 1<<20)
		}
		if err := checkColumn(args[1]); err != nil {
			return PartitionField{}, err
		}
		var t iceberg.Transform = iceberg.BucketTransform{NumBuckets: n}
		if name == "truncate" {
			t = iceberg.TruncateTransform{Width: n}
		}
		return PartitionField{Column: args[1], Transform: t}, nil
	}
	return PartitionField{}, fmt.Errorf("unknown transform %q: want a column, identity, bucket(N,col), truncate(W,col), year, month, day or hour", name)
}

func checkColumn(c string) error {
	if c == "" {
		return fmt.Errorf("empty column name")
	}
	if strings.ContainsAny(c, "(), \t\n") {
		return fmt.Errorf("%q is not a column name", c)
	}
	return nil
}

// Spec binds the fields to schema's columns: a partition spec for a new
// table. A column the schema lacks, or a transform its type cannot take,
// is an error naming both.
func Spec(fields []PartitionField, schema *iceberg.Schema) (*iceberg.PartitionSpec, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	var opts []iceberg.PartitionOption
	for _, f := range fields {
		col, ok := schema.FindFieldByName(f.Column)
		if !ok {
			return nil, fmt.Errorf("partition-by: the files have no column %q", f.Column)
		}
		if !f.Transform.CanTransform(col.Type) {
			return nil, fmt.Errorf("partition-by: %s cannot partition column %q of type %s", f.Transform, f.Column, col.Type)
		}
		name := f.Column
		if _, ok := f.Transform.(iceberg.IdentityTransform); !ok {
			name = f.Column + "_" + strings.SplitN(f.Transform.String(), "[", 2)[0]
		}
		opts = append(opts, iceberg.AddPartitionFieldBySourceID(col.ID, name, f.Transform, schema, nil))
	}
	spec, err := iceberg.NewPartitionSpecOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("partition-by: %w", err)
	}
	return &spec, nil
}
