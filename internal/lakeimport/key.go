package lakeimport

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// withPrimaryKey is the schema of a table the import creates, with key's
// columns as its identifier fields (Iceberg's primary key: what
// stage_features joins staged rows back on). Identifier fields must be
// required, so they are made so; a null in one fails the import before
// its commit (readFile).
func withPrimaryKey(s *iceberg.Schema, key []string, first string) (*iceberg.Schema, error) {
	if len(key) == 0 {
		return s, nil
	}
	fields := slices.Clone(s.Fields())
	var ids []int
	for _, k := range key {
		i := slices.IndexFunc(fields, func(f iceberg.NestedField) bool { return f.Name == k })
		if i < 0 {
			return nil, fmt.Errorf("%w: --primary-key %q is not a column of %s", ErrBadInput, k, first)
		}
		if _, ok := fields[i].Type.(iceberg.PrimitiveType); !ok {
			return nil, fmt.Errorf("%w: --primary-key %q is a %s column: a key must be a plain value", ErrBadInput, k, fields[i].Type)
		}
		if slices.Contains(ids, fields[i].ID) {
			return nil, fmt.Errorf("%w: --primary-key names %q twice", ErrBadInput, k)
		}
		fields[i].Required = true
		ids = append(ids, fields[i].ID)
	}
	return iceberg.NewSchemaWithIdentifiers(s.ID, ids, fields...), nil
}

// checkPrimaryKey: into an existing table, a --primary-key must be the
// table's own.
func checkPrimaryKey(tbl *table.Table, key []string) error {
	if len(key) == 0 {
		return nil
	}
	var have []string
	for _, id := range tbl.Schema().IdentifierFieldIDs {
		if n, ok := tbl.Schema().FindColumnName(id); ok {
			have = append(have, n)
		}
	}
	if !slices.Equal(have, key) {
		return fmt.Errorf("%w: --primary-key %s is not table %s's primary key (%s): leave --primary-key out to import into it as it is",
			ErrBadInput, strings.Join(key, ","), lake.Name(tbl.Identifier()), orNone(have))
	}
	return nil
}

func orNone(cols []string) string {
	if len(cols) == 0 {
		return "none"
	}
	return strings.Join(cols, ",")
}

// requiredColumns are the names of tbl's required top-level columns.
func requiredColumns(tbl *table.Table) []string {
	var out []string
	for _, f := range tbl.Schema().Fields() {
		if f.Required {
			out = append(out, f.Name)
		}
	}
	return out
}

// withRequired is s with the required columns not nullable, as the
// table's schema has them (the writer refuses a nullable field for a
// required one).
func withRequired(s *arrow.Schema, required []string) *arrow.Schema {
	fields := slices.Clone(s.Fields())
	for i := range fields {
		if slices.Contains(required, fields[i].Name) {
			fields[i].Nullable = false
		}
	}
	return arrow.NewSchema(fields, nil)
}

// keyNulls is an error when a batch has a null in a required column.
func keyNulls(rec arrow.RecordBatch, required []string) error {
	for _, k := range required {
		idx := rec.Schema().FieldIndices(k)
		if len(idx) > 0 && rec.Column(idx[0]).NullN() > 0 {
			return fmt.Errorf("%w: column %q is required (a primary key's are) and holds %d null(s); nothing was imported", ErrBadInput, k, rec.Column(idx[0]).NullN())
		}
	}
	return nil
}
