package lake

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// kindColumn makes one column of a partition as the demo data's files
// hold it: rows sorted by user (about 20 rows a user), request ids
// distinct and unordered, event times ascending within a user, features
// constant within a user's day.
func kindColumn(mem memory.Allocator, name string, rows int) (arrow.Field, arrow.Array) {
	r := rand.New(rand.NewPCG(1, 2))
	const perUser = 20
	switch name {
	case "unique":
		b := array.NewInt64Builder(mem)
		for _, v := range r.Perm(rows * 16)[:rows] {
			b.Append(int64(v))
		}
		return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64}, b.NewArray()
	case "time":
		typ := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
		b := array.NewTimestampBuilder(mem, typ)
		var t int64
		for i := range rows {
			if i%perUser == 0 {
				t = 1_790_000_000_000_000 + r.Int64N(3_600_000_000)
			}
			t += r.Int64N(3_600_000_000)
			b.Append(arrow.Timestamp(t))
		}
		return arrow.Field{Name: name, Type: typ}, b.NewArray()
	case "entity":
		b := array.NewInt64Builder(mem)
		var u int64
		for i := range rows {
			if i%perUser == 0 {
				u = r.Int64N(1 << 40)
			}
			b.Append(u)
		}
		return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64}, b.NewArray()
	case "category": // ad ids: one of 1,000 per row, in no order
		b := array.NewInt64Builder(mem)
		for range rows {
			b.Append(r.Int64N(1000) * 7919)
		}
		return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64}, b.NewArray()
	case "category_feature": // an ad's feature: one of 1,000 values per row, in no order
		vals := make([]float64, 1000)
		for i := range vals {
			vals[i] = r.NormFloat64()
		}
		b := array.NewFloat64Builder(mem)
		for range rows {
			b.Append(vals[r.IntN(1000)])
		}
		return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64, Nullable: true}, b.NewArray()
	case "feature":
		b := array.NewFloat64Builder(mem)
		var v float64
		for i := range rows {
			if i%perUser == 0 {
				v = r.NormFloat64()
			}
			b.Append(v)
		}
		return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64, Nullable: true}, b.NewArray()
	default: // list: a user's recent ads
		typ := arrow.ListOf(arrow.PrimitiveTypes.Int64)
		b := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int64)
		vb := b.ValueBuilder().(*array.Int64Builder)
		var ads []int64
		for i := range rows {
			if i%perUser == 0 {
				ads = []int64{r.Int64N(1000), r.Int64N(1000), r.Int64N(1000)}
			}
			b.Append(true)
			vb.AppendValues(ads, nil)
		}
		return arrow.Field{Name: name, Type: typ, Nullable: true}, b.NewArray()
	}
}

// BenchmarkColumnSettings measures the time and bytes per row of each
// kind of column under each candidate setting (dictionary or not, zstd
// level), one 12,500-row file at a time (a partition of the 2M-row demo
// data: 10 days x 16 buckets), which is how columnSettings was chosen:
//
//	go test ./internal/lake/ -run '^$' -bench ColumnSettings
func BenchmarkColumnSettings(b *testing.B) {
	const rows = 12_500
	mem := memory.NewGoAllocator()
	for _, kind := range []string{"unique", "time", "entity", "feature", "category", "category_feature", "list"} {
		field, arr := kindColumn(mem, kind, rows)
		schema := arrow.NewSchema([]arrow.Field{field}, nil)
		rec := array.NewRecordBatch(schema, []arrow.Array{arr}, rows)
		for _, dict := range []bool{true, false} {
			for _, level := range []int{1, 3} {
				b.Run(fmt.Sprintf("%s/dict=%t/zstd=%d", kind, dict, level), func(b *testing.B) {
					props := parquet.NewWriterProperties(
						parquet.WithDataPageVersion(parquet.DataPageV2),
						parquet.WithCompression(compress.Codecs.Zstd), parquet.WithCompressionLevel(level),
						parquet.WithDictionaryDefault(dict), parquet.WithStats(true),
						parquet.WithDictionaryCostFallbackFor(columnPath(field), true))
					var buf bytes.Buffer
					cpu0 := cpuNanos()
					for range b.N {
						buf.Reset()
						w, err := pqarrow.NewFileWriter(schema, &buf, props, pqarrow.DefaultWriterProps())
						if err != nil {
							b.Fatal(err)
						}
						if err := w.WriteBuffered(rec); err != nil {
							b.Fatal(err)
						}
						if err := w.Close(); err != nil {
							b.Fatal(err)
						}
					}
					// CPU time, not wall time: on a shared machine the wall
					// clock mostly measures the neighbours.
					b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N*rows), "cpu_ns/row")
					b.ReportMetric(float64(buf.Len())/rows, "bytes/row")
				})
			}
		}
		rec.Release()
	}
}

func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func columnPath(f arrow.Field) string {
	if f.Type.ID() == arrow.LIST {
		return f.Name + ".list.element"
	}
	return f.Name
}
