// Package tabular reads tables whose shape is only known at run time (CSV
// with a header row, Parquet files) as Parquet rows, so that they can be
// checkpointed with checkpoint.CreateRows. CSV columns are typed either as
// declared or by inference over the whole input: the narrowest of int64,
// double, bool and string that every value of the column parses as.
package tabular

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// Type is a column type.
type Type string

// Column types, narrowest first: inference picks the first one every value
// of a column parses as.
const (
	Int64  Type = "int64"
	Double Type = "double"
	Bool   Type = "bool"
	String Type = "string"
)

var inferOrder = []Type{Int64, Double, Bool, String}

// ParseType accepts a type name and its common aliases.
func ParseType(s string) (Type, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "int64", "int", "integer", "long", "bigint":
		return Int64, nil
	case "double", "float", "float64", "number", "real":
		return Double, nil
	case "bool", "boolean":
		return Bool, nil
	case "string", "str", "text", "utf8":
		return String, nil
	}
	return "", fmt.Errorf("unknown column type %q (want int64, double, bool or string)", s)
}

// Column is a named, typed column. Every column is optional: an empty CSV
// field of a non-string column is a null.
type Column struct {
	Name string `json:"name"`
	Type Type   `json:"type"`
}

// Schema returns the Parquet schema of columns, in their order: readers
// (DuckDB, pandas) show a file's columns in schema order, and a table's
// order is part of what its author wrote.
func Schema(columns []Column) (*parquet.Schema, error) {
	if len(columns) == 0 {
		return nil, errors.New("tabular: no columns")
	}
	// A parquet.Group sorts its fields by name, so the root is an
	// orderedGroup of the Group's fields (which know how to read a value)
	// arranged in column order.
	g := parquet.Group{}
	for _, c := range columns {
		if c.Name == "" {
			return nil, errors.New("tabular: a column has an empty name")
		}
		if _, dup := g[c.Name]; dup {
			return nil, fmt.Errorf("tabular: column %q appears twice", c.Name)
		}
		var leaf parquet.Node
		switch c.Type {
		case Int64:
			leaf = parquet.Int(64)
		case Double:
			leaf = parquet.Leaf(parquet.DoubleType)
		case Bool:
			leaf = parquet.Leaf(parquet.BooleanType)
		case String:
			leaf = parquet.String()
		default:
			return nil, fmt.Errorf("tabular: column %q: unknown type %q", c.Name, c.Type)
		}
		g[c.Name] = parquet.Optional(leaf)
	}
	pos := make(map[string]int, len(columns))
	for i, c := range columns {
		pos[c.Name] = i
	}
	fields := g.Fields()
	slices.SortFunc(fields, func(a, b parquet.Field) int { return pos[a.Name()] - pos[b.Name()] })
	return parquet.NewSchema("row", orderedGroup{Group: g, fields: fields}), nil
}

// orderedGroup is a parquet.Group whose fields keep a given order.
type orderedGroup struct {
	parquet.Group // everything but the order and the printed form
	fields        []parquet.Field
}

func (g orderedGroup) Fields() []parquet.Field { return g.fields }

func (g orderedGroup) String() string {
	var b strings.Builder
	parquet.PrintSchema(&b, "", g)
	return b.String()
}

// parse converts one CSV field to a value of typ.
func parse(typ Type, s string) (parquet.Value, error) {
	switch typ {
	case Int64:
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return parquet.Int64Value(v), err
	case Double:
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		return parquet.DoubleValue(v), err
	case Bool:
		v, err := strconv.ParseBool(strings.TrimSpace(s))
		return parquet.BooleanValue(v), err
	}
	return parquet.ByteArrayValue([]byte(s)), nil
}

// isNull reports whether a CSV field of typ is a null: an empty field,
// except in a string column, where it is the empty string.
func isNull(typ Type, s string) bool {
	return typ != String && strings.TrimSpace(s) == ""
}

// newCSVReader returns a CSV reader that tolerates what spreadsheets and
// scripts write: a byte order mark is stripped by the caller, quotes are
// standard, every record must have the header's field count.
func newCSVReader(r io.Reader) *csv.Reader {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	return cr
}

// readHeader reads the header row.
func readHeader(cr *csv.Reader) ([]string, error) {
	h, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("tabular: CSV input is empty (want a header row)")
	}
	if err != nil {
		return nil, fmt.Errorf("tabular: CSV header: %w", err)
	}
	header := slices.Clone(h)
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\uFEFF")
	}
	seen := make(map[string]bool, len(header))
	for i, name := range header {
		name = strings.TrimSpace(name)
		header[i] = name
		if name == "" {
			return nil, fmt.Errorf("tabular: CSV header: column %d has no name", i+1)
		}
		if seen[name] {
			return nil, fmt.Errorf("tabular: CSV header: column %q appears twice", name)
		}
		seen[name] = true
	}
	return header, nil
}

// CSVHeader reads the header row of CSV input and returns its column names
// in order.
func CSVHeader(r io.Reader) ([]string, error) { return readHeader(newCSVReader(r)) }

// InferCSV reads the whole CSV input and returns its columns in header
// order, each typed with the narrowest type all its non-null values parse
// as. A column with no values is a string column.
func InferCSV(r io.Reader) ([]Column, error) {
	cr := newCSVReader(r)
	header, err := readHeader(cr)
	if err != nil {
		return nil, err
	}
	// cand[i] indexes inferOrder: the narrowest type column i may still be.
	cand := make([]int, len(header))
	seen := make([]bool, len(header))
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tabular: CSV: %w", err)
		}
		for i, s := range rec {
			if strings.TrimSpace(s) == "" {
				continue
			}
			seen[i] = true
			for inferOrder[cand[i]] != String {
				if _, err := parse(inferOrder[cand[i]], s); err == nil {
					break
				}
				cand[i]++
			}
		}
	}
	cols := make([]Column, len(header))
	for i, name := range header {
		t := inferOrder[cand[i]]
		if !seen[i] {
			t = String
		}
		cols[i] = Column{Name: name, Type: t}
	}
	return cols, nil
}

// CSVReader reads CSV records as Parquet rows of declared columns.
type CSVReader struct {
	cr     *csv.Reader
	schema *parquet.Schema
	types  []Type   // by CSV field
	names  []string // column name, by CSV field
	index  []int    // Parquet column index, by CSV field
	rows   int64
}

// NewCSVReader reads the header from r and checks that it names exactly
// the given columns (in any order). Rows have the columns' order.
func NewCSVReader(r io.Reader, columns []Column) (*CSVReader, error) {
	schema, err := Schema(columns)
	if err != nil {
		return nil, err
	}
	cr := newCSVReader(r)
	header, err := readHeader(cr)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]Type, len(columns))
	for _, c := range columns {
		byName[c.Name] = c.Type
	}
	c := &CSVReader{cr: cr, schema: schema}
	for _, name := range header {
		typ, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("tabular: CSV column %q is not among the declared columns %s", name, columnNames(columns))
		}
		leaf, ok := schema.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("tabular: column %q missing from schema", name)
		}
		c.types = append(c.types, typ)
		c.names = append(c.names, name)
		c.index = append(c.index, leaf.ColumnIndex)
	}
	if len(header) != len(columns) {
		var missing []string
		for _, col := range columns {
			if !slices.Contains(header, col.Name) {
				missing = append(missing, col.Name)
			}
		}
		return nil, fmt.Errorf("tabular: declared column(s) %q missing from the CSV header", missing)
	}
	return c, nil
}

func columnNames(columns []Column) string {
	names := make([]string, len(columns))
	for i, c := range columns {
		names[i] = c.Name
	}
	return fmt.Sprintf("%q", names)
}

// Schema returns the schema rows are read in.
func (c *CSVReader) Schema() *parquet.Schema { return c.schema }

// Rows returns how many rows were read.
func (c *CSVReader) Rows() int64 { return c.rows }

// ReadRows reads up to len(rows) rows, reusing their storage, and returns
// how many it read; io.EOF after the last row.
func (c *CSVReader) ReadRows(rows []parquet.Row) (int, error) {
	for n := range rows {
		rec, err := c.cr.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, io.EOF
			}
			return n, fmt.Errorf("tabular: CSV: %w", err)
		}
		row := slices.Grow(rows[n][:0], len(rec))[:len(rec)]
		for i, s := range rec {
			var v parquet.Value
			if isNull(c.types[i], s) {
				v = parquet.NullValue().Level(0, 0, c.index[i])
			} else {
				pv, err := parse(c.types[i], s)
				if err != nil {
					// The value itself is not quoted: a cell may hold
					// anything (a secret a step was given), and this
					// message goes to the run's history and report.
					line, _ := c.cr.FieldPos(i)
					return n, fmt.Errorf("tabular: CSV line %d, column %q: the value is not %s (%s)", line, c.names[i], article(c.types[i]), shape(s))
				}
				v = pv.Level(0, 1, c.index[i])
			}
			row[c.index[i]] = v
		}
		rows[n] = row
		c.rows++
	}
	return len(rows), nil
}

// shape describes a value that failed to parse without showing it.
func shape(s string) string {
	if n := strings.Count(strings.TrimSpace(s), "\n"); n > 0 {
		return fmt.Sprintf("%d bytes over %d lines", len(s), n+1)
	}
	return fmt.Sprintf("%d bytes", len(s))
}

func article(t Type) string {
	if t == Int64 {
		return "an int64"
	}
	return "a " + string(t)
}
