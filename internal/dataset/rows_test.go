package dataset

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// rowsSchema has every kind of column a split holds.
var rowsSchema = Schema{
	Label: "clicked", Date: "day", RequestID: "rid", Slice: "country",
	Columns: []Column{
		{Name: "activity", Kind: Dense},
		{Name: "user_id", Kind: ID},
		{Name: "recent", Kind: IDList},
		{Name: "price", Kind: Dense},
		{Name: "ads", Kind: IDList},
	},
}

// splitFile writes n random rows of s as a split file does (s.RowType,
// GenericWriter[any]): nulls, empty and null lists included.
func splitFile(t testing.TB, s Schema, n int, seed uint64) []byte {
	t.Helper()
	typ := s.RowType()
	r := rand.New(rand.NewPCG(seed, 1))
	rows := make([]any, n)
	for i := range rows {
		v := reflect.New(typ).Elem()
		for f := range typ.NumField() {
			fv := v.Field(f)
			name := strings.Split(typ.Field(f).Tag.Get("parquet"), ",")[0]
			switch fv.Kind() {
			case reflect.Int64:
				fv.SetInt(int64(i)*7 + 3)
			case reflect.Int32:
				fv.SetInt(20000 + int64(r.IntN(5)))
			case reflect.Float32:
				fv.SetFloat(float64(r.IntN(2)))
			case reflect.Pointer:
				if r.IntN(4) == 0 {
					continue // null
				}
				p := reflect.New(fv.Type().Elem())
				switch p.Elem().Kind() {
				case reflect.Float64:
					p.Elem().SetFloat(r.NormFloat64())
				case reflect.Int64:
					p.Elem().SetInt(r.Int64N(1 << 40))
				case reflect.String:
					p.Elem().SetString([]string{"DE", "FR", "US"}[r.IntN(3)])
				}
				fv.Set(p)
			case reflect.Slice:
				k := r.IntN(4) - 1 // -1: a null list, 0: an empty one
				if k < 0 {
					continue
				}
				ids := make([]int64, k)
				for j := range ids {
					ids[j] = r.Int64N(1000)
				}
				fv.Set(reflect.ValueOf(ids))
			default:
				t.Fatalf("column %s: kind %s", name, fv.Kind())
			}
		}
		rows[i] = v.Interface()
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[any](&buf, parquet.SchemaOf(reflect.New(typ).Interface()), parquet.PageBufferSize(4<<10))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readBoth loads file with LoadBatch (rows read as maps) and LoadRows
// (rows read as parquet.Row), batch rows at a time, s being the reader's
// schema (which may differ from the writer's).
func readBoth(t testing.TB, s Schema, file []byte, batch int) (maps, rows []*Data) {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	mr := parquet.NewGenericReader[any](f)
	rr := parquet.NewGenericReader[any](f)
	mbuf, rbuf := make([]any, batch), make([]parquet.Row, batch)
	for {
		n, err := mr.Read(mbuf)
		k, rerr := rr.ReadRows(rbuf)
		if n != k {
			t.Fatalf("read %d rows as maps, %d as parquet rows", n, k)
		}
		if n > 0 {
			a, err := LoadBatch(s, mbuf[:n])
			if err != nil {
				t.Fatal(err)
			}
			b, err := LoadRows(s, f.Schema(), rbuf[:n])
			if err != nil {
				t.Fatal(err)
			}
			maps, rows = append(maps, a), append(rows, b)
		}
		if err != nil || rerr != nil {
			return maps, rows
		}
	}
}

// sameData fails unless a and b hold the same values (NaN equal to NaN).
func sameData(t *testing.T, what string, a, b *Data) {
	t.Helper()
	bits := func(fs []float32) []uint32 {
		out := make([]uint32, len(fs))
		for i, f := range fs {
			out[i] = math.Float32bits(f)
		}
		return out
	}
	check := func(name string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s: %s differ:\n maps: %v\n rows: %v", what, name, x, y)
		}
	}
	check("request ids", a.RequestID, b.RequestID)
	check("dates", a.Date, b.Date)
	check("labels", bits(a.Label), bits(b.Label))
	check("slices", a.Slice, b.Slice)
	check("dense column names", len(a.dense), len(b.dense))
	for name, col := range a.dense {
		check("dense "+name, bits(col), bits(b.dense[name]))
	}
	check("id column names", len(a.ids), len(b.ids))
	for name, col := range a.ids {
		check("ids "+name, col, b.ids[name])
	}
}

func TestLoadRowsIsLoadBatch(t *testing.T) {
	file := splitFile(t, rowsSchema, 5000, 1)
	// The reader's schema as written; one with a feature the file lacks
	// (missing in every row) and without the slice and request id; one
	// whose feature list omits some of the file's columns.
	lacks := rowsSchema
	lacks.RequestID, lacks.Slice = "", ""
	lacks.Columns = append([]Column{{Name: "later", Kind: Dense}, {Name: "later_ids", Kind: IDList}, {Name: "later_id", Kind: ID}}, rowsSchema.Columns...)
	fewer := rowsSchema
	fewer.Columns = []Column{rowsSchema.Columns[2], rowsSchema.Columns[0]}
	for name, s := range map[string]Schema{"same": rowsSchema, "lacks": lacks, "fewer": fewer} {
		for _, batch := range []int{1, 777, 8192} {
			maps, rows := readBoth(t, s, file, batch)
			if len(maps) != len(rows) {
				t.Fatalf("%s: %d batches against %d", name, len(maps), len(rows))
			}
			total := 0
			for i := range maps {
				sameData(t, fmt.Sprintf("%s schema, batch %d of %d rows", name, i, batch), maps[i], rows[i])
				total += rows[i].Len()
			}
			if total != 5000 {
				t.Errorf("%s, batches of %d: %d rows, want 5000", name, batch, total)
			}
		}
	}
}

func TestLoadRowsNeedsALabel(t *testing.T) {
	s := Schema{Label: "y", Date: "d", Columns: []Column{{Name: "x", Kind: Dense}}}
	ps := parquet.NewSchema("row", parquet.Group{
		ColDate: parquet.Date(),
		"x":     parquet.Optional(parquet.Leaf(parquet.DoubleType)),
	})
	row := parquet.Row{parquet.Int32Value(20000).Level(0, 0, 0), parquet.DoubleValue(1).Level(0, 1, 1)}
	_, err := LoadRows(s, ps, []parquet.Row{row})
	if err == nil || !strings.Contains(err.Error(), "row 0: no label") {
		t.Errorf("a file without the label column: %v, want row 0: no label", err)
	}
}

// BenchmarkLoad compares loading a split batch from maps (LoadBatch, rows
// read with GenericReader[any].Read) and from parquet rows (LoadRows,
// ReadRows into reused rows), reading included: rows/s of each and the
// ratio, measured in the same run.
func BenchmarkLoad(b *testing.B) {
	const n = 100_000
	file := splitFile(b, rowsSchema, n, 2)
	f, err := parquet.OpenFile(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		b.Fatal(err)
	}
	mbuf, rbuf := make([]any, 8192), make([]parquet.Row, 8192)
	var mapsNS, rowsNS float64
	for b.Loop() {
		start := time.Now()
		r := parquet.NewGenericReader[any](f)
		for {
			k, err := r.Read(mbuf)
			if _, lerr := LoadBatch(rowsSchema, mbuf[:k]); lerr != nil {
				b.Fatal(lerr)
			}
			clear(mbuf[:k])
			if err != nil {
				break
			}
		}
		mid := time.Now()
		r = parquet.NewGenericReader[any](f)
		for {
			k, err := r.ReadRows(rbuf)
			if _, lerr := LoadRows(rowsSchema, f.Schema(), rbuf[:k]); lerr != nil {
				b.Fatal(lerr)
			}
			if err != nil {
				break
			}
		}
		end := time.Now()
		mapsNS += float64(mid.Sub(start).Nanoseconds())
		rowsNS += float64(end.Sub(mid).Nanoseconds())
	}
	b.ReportMetric(float64(n)*float64(b.N)/(mapsNS/1e9), "maps-rows/s")
	b.ReportMetric(float64(n)*float64(b.N)/(rowsNS/1e9), "parquet-rows/s")
	b.ReportMetric(mapsNS/rowsNS, "speedup")
}

func TestCombineIsLoad(t *testing.T) {
	file := splitFile(t, rowsSchema, 3000, 3)
	f, err := parquet.OpenFile(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	all := make([]any, 3000)
	if n, _ := parquet.NewGenericReader[any](f).Read(all); n != 3000 {
		t.Fatalf("read %d rows", n)
	}
	// Request ids in the file descend in places, so the sort matters.
	all[0], all[2999] = all[2999], all[0]
	want, err := Load(rowsSchema, all)
	if err != nil {
		t.Fatal(err)
	}
	var parts []*Data
	for lo := 0; lo < 3000; lo += 700 {
		p, err := LoadBatch(rowsSchema, all[lo:min(lo+700, 3000)])
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	sameData(t, "combined batches", want, Combine(rowsSchema, parts))
	empty, _ := Load(rowsSchema, nil)
	sameData(t, "no batches", empty, Combine(rowsSchema, nil))
	if _, err := Combine(rowsSchema, nil).Examples(rowsSchema.Dense(), rowsSchema.Sparse()); err != nil {
		t.Errorf("examples of an empty dataset: %v", err)
	}
}
