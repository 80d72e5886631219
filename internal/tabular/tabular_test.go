package tabular

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

func TestInferCSV(t *testing.T) {
	cases := []struct {
		name, csv string
		want      []Column
	}{
		{"ints", "a\n1\n-2\n", []Column{{"a", Int64}}},
		{"ints and floats", "a\n1\n2.5\n", []Column{{"a", Double}}},
		{"bools", "a\ntrue\nFALSE\n", []Column{{"a", Bool}}},
		{"0/1 are ints", "a\n0\n1\n", []Column{{"a", Int64}}},
		{"mixed is string", "a\n1\nx\n", []Column{{"a", String}}},
		{"nulls do not count", "a,b\n,1\n2,\n", []Column{{"a", Int64}, {"b", Int64}}},
		{"all empty is string", "a\n\n\"\"\n", []Column{{"a", String}}},
		{"header only", "a,b\n", []Column{{"a", String}, {"b", String}}},
		{"byte order mark", "\uFEFFa\n1\n", []Column{{"a", Int64}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := InferCSV(strings.NewReader(c.csv))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestInferCSVErrors(t *testing.T) {
	for _, csv := range []string{"", "a,a\n1,2\n", "a,\n1,2\n", "a,b\n1\n"} {
		if _, err := InferCSV(strings.NewReader(csv)); err == nil {
			t.Errorf("%q: no error", csv)
		}
	}
}

func TestCSVReader(t *testing.T) {
	cols := []Column{{"score", Double}, {"id", Int64}, {"name", String}}
	r, err := NewCSVReader(strings.NewReader("id,name,score\n1,x,0.5\n2,,\n"), cols)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]parquet.Row, 4)
	n, err := r.ReadRows(rows)
	if n != 2 || !errors.Is(err, io.EOF) {
		t.Fatalf("ReadRows = %d, %v", n, err)
	}
	// Rows follow the declared columns (score, id, name), not the header.
	if rows[0][0].Double() != 0.5 || rows[0][1].Int64() != 1 || string(rows[0][2].ByteArray()) != "x" {
		t.Fatalf("row 0 = %v", rows[0])
	}
	if !rows[1][0].IsNull() || rows[1][2].IsNull() || string(rows[1][2].ByteArray()) != "" {
		t.Fatalf("row 1 = %v: an empty double is null, an empty string is \"\"", rows[1])
	}

	for _, c := range []struct{ csv, msg string }{
		{"id,name\n", "missing from the CSV header"},
		{"id,name,score,extra\n", `"extra" is not among the declared columns`},
	} {
		if _, err := NewCSVReader(strings.NewReader(c.csv), cols); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.csv, err, c.msg)
		}
	}
	r, _ = NewCSVReader(strings.NewReader("id,name,score\n1,x,0.5\nseven,y,1\n"), cols)
	if _, err := r.ReadRows(rows); err == nil || !strings.Contains(err.Error(), `line 3, column "id": the value is not an int64`) || strings.Contains(err.Error(), "seven") {
		t.Fatalf("bad value: %v", err)
	}
}

// TestSchemaKeepsColumnOrder: a schema, and a file written with it, list
// the columns in the given order, not by name as a parquet.Group would.
func TestSchemaKeepsColumnOrder(t *testing.T) {
	cols := []Column{{"zeta", Int64}, {"alpha", String}, {"mid", Double}}
	schema, err := Schema(cols)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"zeta", "alpha", "mid"}
	var got []string
	for _, path := range schema.Columns() {
		got = append(got, strings.Join(path, "."))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("schema columns %v, want %v", got, want)
	}
	if s := schema.String(); !(strings.Index(s, "zeta") < strings.Index(s, "alpha") && strings.Index(s, "alpha") < strings.Index(s, "mid")) {
		t.Fatalf("schema text out of order:\n%s", s)
	}

	r, err := NewCSVReader(strings.NewReader("mid,alpha,zeta\n0.5,x,7\n"), cols)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]parquet.Row, 1)
	if n, err := r.ReadRows(rows); n != 1 || (err != nil && !errors.Is(err, io.EOF)) {
		t.Fatalf("ReadRows = %d, %v", n, err)
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[any](&buf, schema)
	if _, err := w.WriteRows(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, field := range f.Schema().Fields() {
		got = append(got, field.Name())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("file columns %v, want %v", got, want)
	}
	back := make([]parquet.Row, 1)
	if n, _ := f.RowGroups()[0].Rows().ReadRows(back); n != 1 || back[0][0].Int64() != 7 || string(back[0][1].ByteArray()) != "x" || back[0][2].Double() != 0.5 {
		t.Fatalf("read back %v", back[0])
	}
}

func TestCSVHeader(t *testing.T) {
	got, err := CSVHeader(strings.NewReader("\uFEFFb, a ,c\n1,2,3\n"))
	if err != nil || !slices.Equal(got, []string{"b", "a", "c"}) {
		t.Fatalf("CSVHeader = %v, %v", got, err)
	}
	if _, err := CSVHeader(strings.NewReader("")); err == nil {
		t.Fatal("empty input: no error")
	}
}
