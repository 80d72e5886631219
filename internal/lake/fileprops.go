package lake

import (
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
)

// fileProps are the Parquet settings of the files WritePartitions writes.
type fileProps struct {
	writer       *parquet.WriterProperties
	arrow        pqarrow.ArrowWriterProperties
	rowGroupRows int64
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
	opts = append(opts, columnProps(schema, ids, columnSettings, codec == compress.Codecs.Zstd, levelSet)...)
	return fileProps{
		writer:       parquet.NewWriterProperties(opts...),
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
)

func (k columnKind) String() string {
	return [...]string{"other", "unique", "time", "list"}[k]
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
}

// defaultZstdLevel is klauspost/compress's default (level 3, "SpeedDefault").
const defaultZstdLevel = 3

// kindOf classifies a top-level column of a table with the given
// identifier columns.
func kindOf(f arrow.Field, identifiers map[string]bool) columnKind {
	switch {
	case identifiers[f.Name]:
		return kindUnique
	case f.Type.ID() == arrow.TIMESTAMP:
		return kindTime
	}
	return kindOther
}

// columnProps are the per-column settings, by column kind. A table
// property setting the compression level overrides the kinds' levels.
func columnProps(schema *arrow.Schema, identifiers map[string]bool, settings map[columnKind]columnSetting, zstd, levelSet bool) []parquet.WriterProperty {
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
		walk(f.Name, f.Type, kindOf(f, identifiers))
	}
	return out
}
