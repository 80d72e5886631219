package lake

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
)

// fileProps are the Parquet settings of the files WritePartitions writes.
type fileProps struct {
	base         []parquet.WriterProperty // file-wide settings
	schema       *arrow.Schema
	identifiers  map[string]bool
	zstd         bool
	levelSet     bool // the table sets the compression level
	arrow        pqarrow.ArrowWriterProperties
	rowGroupRows int64
}

// forFile is the settings of one file whose top-level columns named in
// runs hold values in long runs (see runColumns).
func (p fileProps) forFile(runs map[string]bool) *parquet.WriterProperties {
	opts := append(slices.Clone(p.base), columnProps(p.schema, p.identifiers, runs, columnSettings, p.zstd, p.levelSet)...)
	return parquet.NewWriterProperties(opts...)
}

// Table properties WritePartitions honours, as iceberg-go's writer does.
const (
	propCompression = "write.parquet.compression-codec"
	propLevel       = "write.parquet.compression-level"
	propRowGroup    = "write.parquet.row-group-limit"
)

// newFileProps builds the Parquet settings for files of schema. The
// codec (zstd unless the table says otherwise) and row-group limit come
// from the table's properties; the rest is what iceberg-go writes (v2
// data pages, 1 MiB pages, statistics, the Arrow schema in the footer),
// except for the per-column choices in columnProps.
func newFileProps(props iceberg.Properties, schema *arrow.Schema, identifiers []string, mem memory.Allocator) (fileProps, error) {
	codec := compress.Codecs.Zstd
	switch c := props.Get(propCompression, "zstd"); c {
	case "zstd":
	case "snappy":
		codec = compress.Codecs.Snappy
	case "gzip":
		codec = compress.Codecs.Gzip
	case "uncompressed":
		codec = compress.Codecs.Uncompressed
	default:
		return fileProps{}, fmt.Errorf("table property %s=%s is not supported by this writer (zstd, snappy, gzip, uncompressed)", propCompression, c)
	}
	level := compress.DefaultCompressionLevel
	v, levelSet := props[propLevel]
	levelSet = levelSet && v != ""
	if levelSet {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fileProps{}, fmt.Errorf("table property %s=%s: %w", propLevel, v, err)
		}
		level = n
	}
	rows := int64(props.GetInt(propRowGroup, 1<<20))
	if rows <= 0 {
		return fileProps{}, fmt.Errorf("table property %s must be positive", propRowGroup)
	}
	opts := []parquet.WriterProperty{
		parquet.WithDataPageVersion(parquet.DataPageV2),
		parquet.WithDataPageSize(1 << 20),
		parquet.WithBatchSize(20000),
		parquet.WithDictionaryPageSizeLimit(2 << 20),
		parquet.WithMaxRowGroupLength(rows),
		parquet.WithCompression(codec),
		parquet.WithCompressionLevel(level),
		parquet.WithStats(true),
		parquet.WithAllocator(mem),
	}
	ids := map[string]bool{}
	for _, n := range identifiers {
		ids[n] = true
	}
	return fileProps{
		base: opts, schema: schema, identifiers: ids, zstd: codec == compress.Codecs.Zstd, levelSet: levelSet,
		arrow:        pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(mem)),
		rowGroupRows: rows,
	}, nil
}

// columnKind sorts columns by how their values repeat within a file,
// which decides what encoding pays.
type columnKind int

const (
	// kindOther: entity ids, labels, dates, features: values repeat
	// (a user's rows share user_id and that day's features).
	kindOther columnKind = iota
	// kindUnique: the table's identifier (primary key) columns: every
	// value is distinct, so a dictionary only costs.
	kindUnique
	// kindTime: timestamps, nearly all distinct.
	kindTime
	// kindList: the elements of lists (a user's recent ads).
	kindList
	// kindRuns: an "other" column whose values come in long runs in this
	// file (a user's features in rows sorted by user): plain encoding
	// and zstd compress the runs better than a dictionary, for less CPU.
	kindRuns
)

func (k columnKind) String() string {
	return [...]string{"other", "unique", "time", "list", "runs"}[k]
}

// columnSetting is how one kind of column is written.
type columnSetting struct {
	dictionary bool
	zstdLevel  int // used when the codec is zstd
}

// columnSettings are the per-kind choices, measured on synthetic columns
// shaped like the demo data's with `go test ./internal/lake/ -run '^$'
// -bench ColumnSettings` (CPU ns and bytes per row, 12,500-row files,
// zstd): a dictionary costs unique ids 20-40% more CPU for no byte
// saved, and timestamps 2.5x at level 3 against level 1 for 19% fewer
// bytes of that one column; list elements are smaller and cheaper
// without a dictionary; repeated values in no order (ad ids, an ad's
// features) are 25% smaller and cheaper with one, so other columns keep
// it (with the cost fallback for when it does not pay).
var columnSettings = map[columnKind]columnSetting{
	kindOther:  {dictionary: true, zstdLevel: defaultZstdLevel},
	kindUnique: {dictionary: false, zstdLevel: defaultZstdLevel},
	kindTime:   {dictionary: false, zstdLevel: 1},
	kindList:   {dictionary: false, zstdLevel: defaultZstdLevel},
	// Runs of 20 (a user's rows): without a dictionary 13% fewer bytes
	// and 25-40% less CPU (entity ids, features); unordered repeated
	// values are the other way round, hence the per-file choice.
	kindRuns: {dictionary: false, zstdLevel: defaultZstdLevel},
}

// defaultZstdLevel is klauspost/compress's default (level 3, "SpeedDefault").
const defaultZstdLevel = 3

// kindOf classifies a top-level column of a table with the given
// identifier columns.
func kindOf(f arrow.Field, identifiers, runs map[string]bool) columnKind {
	switch {
	case identifiers[f.Name]:
		return kindUnique
	case f.Type.ID() == arrow.TIMESTAMP:
		return kindTime
	case runs[f.Name]:
		return kindRuns
	}
	return kindOther
}

// minRunLength is the mean run length from which a column counts as
// runs: BenchmarkColumnSettings measured runs of 20 against no runs.
const minRunLength = 8

// runColumns names the top-level fixed-width columns of rec whose values
// come in runs of minRunLength or more on average. The first batch of a
// file decides for the file: a partition's rows are sorted the same way
// throughout.
func runColumns(rec arrow.RecordBatch) map[string]bool {
	out := map[string]bool{}
	n := int(rec.NumRows())
	if n < 2*minRunLength {
		return out
	}
	for i, f := range rec.Schema().Fields() {
		col := rec.Column(i)
		var same func(a, b int) bool
		switch c := col.(type) {
		case *array.Int64:
			same = func(a, b int) bool { return c.Value(a) == c.Value(b) }
		case *array.Float64:
			same = func(a, b int) bool { return c.Value(a) == c.Value(b) }
		case *array.Int32:
			same = func(a, b int) bool { return c.Value(a) == c.Value(b) }
		case *array.Date32:
			same = func(a, b int) bool { return c.Value(a) == c.Value(b) }
		default:
			continue
		}
		runs := 1
		for r := 1; r < n; r++ {
			if col.IsNull(r) != col.IsNull(r-1) || (col.IsValid(r) && !same(r, r-1)) {
				runs++
			}
		}
		if n/runs >= minRunLength {
			out[f.Name] = true
		}
	}
	return out
}

// columnProps are the per-column settings, by column kind. A table
// property setting the compression level overrides the kinds' levels.
func columnProps(schema *arrow.Schema, identifiers, runs map[string]bool, settings map[columnKind]columnSetting, zstd, levelSet bool) []parquet.WriterProperty {
	var out []parquet.WriterProperty
	var walk func(path string, dt arrow.DataType, kind columnKind)
	walk = func(path string, dt arrow.DataType, kind columnKind) {
		switch t := dt.(type) {
		case arrow.ListLikeType:
			walk(path+".list.element", t.Elem(), kindList)
		case *arrow.StructType:
			for _, f := range t.Fields() {
				walk(path+"."+f.Name, f.Type, kindOther)
			}
		default:
			set := settings[kind]
			out = append(out, parquet.WithDictionaryFor(path, set.dictionary))
			if set.dictionary {
				// As iceberg-go (and parquet-mr): a dictionary that does
				// not pay for itself falls back to plain encoding.
				out = append(out, parquet.WithDictionaryCostFallbackFor(path, true))
			}
			if zstd && !levelSet {
				out = append(out, parquet.WithCompressionLevelFor(path, set.zstdLevel))
			}
		}
	}
	for _, f := range schema.Fields() {
		walk(f.Name, f.Type, kindOf(f, identifiers, runs))
	}
	return out
}
