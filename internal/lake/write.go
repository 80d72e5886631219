package lake

import (
	"context"
	"fmt"
	"iter"
	"maps"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/codec"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// WriteFiles writes records as data files of tbl, split by its partition
// spec, and returns them without committing anything: the caller decides
// which commit (if any) makes them part of the table. Files nobody commits
// are orphans that a later cleanup may remove; readers never see them.
func WriteFiles(ctx context.Context, tbl *table.Table, schema *arrow.Schema, records iter.Seq2[arrow.RecordBatch, error], opts ...table.WriteRecordOption) ([]iceberg.DataFile, error) {
	var files []iceberg.DataFile
	for df, err := range table.WriteRecords(ctx, tbl, schema, records, opts...) {
		if err != nil {
			return nil, fmt.Errorf("write data files of %s: %w", Name(tbl.Identifier()), err)
		}
		files = append(files, df)
	}
	return files, nil
}

// FilesOf lists the data files a scan plans (with its filter), for
// replacing them. Files with deletes attached are refused: retrain's
// tables are append/replace only.
func FilesOf(ctx context.Context, scan *table.Scan) ([]iceberg.DataFile, error) {
	tasks, err := scan.PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("plan files: %w", err)
	}
	out := make([]iceberg.DataFile, 0, len(tasks))
	for _, t := range tasks {
		if len(t.DeleteFiles) > 0 || len(t.EqualityDeleteFiles) > 0 || len(t.DeletionVectorFiles) > 0 {
			return nil, fmt.Errorf("file %s has delete files: row-level deletes are not supported here", t.File.FilePath())
		}
		out = append(out, t.File)
	}
	return out, nil
}

// ReplaceFiles stages on tx the removal of del and the addition of add in
// one snapshot: an overwrite when something is removed, an append
// otherwise. It is the dynamic partition overwrite iceberg-go lacks when
// del are the files of the partitions add covers (see OverwritePartitions).
func ReplaceFiles(ctx context.Context, tx *table.Transaction, del, add []iceberg.DataFile, props iceberg.Properties) error {
	if len(del) == 0 && len(add) == 0 {
		return nil
	}
	if len(del) == 0 {
		return tx.AddDataFiles(ctx, add, props)
	}
	return tx.ReplaceDataFilesWithDataFiles(ctx, del, add, props)
}

// OverwritePartitions stages on tx a dynamic partition overwrite: every
// partition that a file of add belongs to loses the files it has in tbl's
// current snapshot and gains add. Partitions add does not touch are left
// as they are.
func OverwritePartitions(ctx context.Context, tbl *table.Table, tx *table.Transaction, add []iceberg.DataFile, props iceberg.Properties) error {
	keys := map[string]bool{}
	for _, df := range add {
		k, err := PartitionKey(tbl, df)
		if err != nil {
			return err
		}
		keys[k] = true
	}
	var del []iceberg.DataFile
	if tbl.CurrentSnapshot() != nil {
		existing, err := FilesOf(ctx, tbl.Scan())
		if err != nil {
			return err
		}
		for _, df := range existing {
			k, err := PartitionKey(tbl, df)
			if err != nil {
				return err
			}
			if keys[k] {
				del = append(del, df)
			}
		}
	}
	return ReplaceFiles(ctx, tx, del, add, props)
}

// DataFileWithPartition describes an existing Parquet file (written with
// tbl's field ids) as a data file of the given partition. iceberg-go's
// FileToDataFile infers partition values from column bounds, which only
// works for order-preserving transforms; for bucket partitions this reads
// the statistics as for an unpartitioned table and sets the partition
// tuple explicitly. values maps partition field names to their values
// (days for a date identity field, the bucket number for a bucket field).
func DataFileWithPartition(ctx context.Context, tbl *table.Table, path string, values map[string]any) (iceberg.DataFile, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	stats, err := table.FileToDataFile(ctx, fs, path, tbl.Schema(), *iceberg.UnpartitionedSpec, 0, tbl.Properties())
	if err != nil {
		return nil, fmt.Errorf("read statistics of %s: %w", path, err)
	}
	spec := tbl.Spec()
	schema := tbl.Schema()
	data := map[int]any{}
	logical := map[int]string{}
	for _, f := range spec.Fields() {
		v, ok := values[f.Name]
		if !ok {
			return nil, fmt.Errorf("file %s: no value for partition field %s", path, f.Name)
		}
		src, _ := schema.FindFieldByID(f.SourceID())
		switch f.Transform.ResultType(src.Type).(type) {
		case iceberg.DateType:
			n, err := asInt64(v)
			if err != nil {
				return nil, err
			}
			data[f.FieldID] = iceberg.Date(n)
			logical[f.FieldID] = "date"
		case iceberg.Int32Type:
			n, err := asInt64(v)
			if err != nil {
				return nil, err
			}
			data[f.FieldID] = int32(n)
		default:
			data[f.FieldID] = v
		}
	}
	b, err := iceberg.NewDataFileBuilder(spec, iceberg.EntryContentData, path, iceberg.ParquetFile,
		data, logical, nil, stats.Count(), stats.FileSizeBytes())
	if err != nil {
		return nil, err
	}
	b.ColumnSizes(maps.Clone(stats.ColumnSizes())).
		ValueCounts(maps.Clone(stats.ValueCounts())).
		NullValueCounts(maps.Clone(stats.NullValueCounts())).
		NaNValueCounts(maps.Clone(stats.NaNValueCounts())).
		LowerBoundValues(maps.Clone(stats.LowerBoundValues())).
		UpperBoundValues(maps.Clone(stats.UpperBoundValues())).
		SplitOffsets(stats.SplitOffsets())
	return b.Build(), nil
}

// AddFiles appends existing data files to a table in one snapshot (see
// DataFileWithPartition for files of bucket partitions).
func (c *Catalog) AddFiles(ctx context.Context, name string, files []iceberg.DataFile, props iceberg.Properties) (*table.Table, error) {
	return c.Update(ctx, name, func(ctx context.Context, _ *table.Table, tx *table.Transaction) error {
		return tx.AddDataFiles(ctx, files, props)
	})
}

// EncodeDataFiles serializes data files (with their statistics) so that a
// commit in another process can add them: the bytes are what a manifest
// holds for each file.
func EncodeDataFiles(tbl *table.Table, schema *iceberg.Schema, files []iceberg.DataFile) ([][]byte, error) {
	spec := tbl.Spec()
	out := make([][]byte, len(files))
	for i, df := range files {
		b, err := codec.EncodeDataFile(df, spec, schema, tbl.Metadata().Version())
		if err != nil {
			return nil, fmt.Errorf("encode data file %s: %w", df.FilePath(), err)
		}
		out[i] = b
	}
	return out, nil
}

// DecodeDataFiles is the inverse of EncodeDataFiles.
func DecodeDataFiles(tbl *table.Table, schema *iceberg.Schema, encoded [][]byte) ([]iceberg.DataFile, error) {
	spec := tbl.Spec()
	out := make([]iceberg.DataFile, len(encoded))
	for i, b := range encoded {
		df, err := codec.DecodeDataFile(b, spec, schema, tbl.Metadata().Version())
		if err != nil {
			return nil, err
		}
		out[i] = df
	}
	return out, nil
}

// WriteObject writes a small object (a report, a list of pending files)
// at location through the table's file IO, so it works for local and S3
// warehouses alike.
func WriteObject(ctx context.Context, tbl *table.Table, location string, data []byte) error {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	w, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return fmt.Errorf("file IO of %s cannot write", Name(tbl.Identifier()))
	}
	if err := w.WriteFile(location, data); err != nil {
		return fmt.Errorf("write %s: %w", location, err)
	}
	return nil
}

// RemoveObject removes an object written by WriteObject.
func RemoveObject(ctx context.Context, tbl *table.Table, location string) error {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	return fs.Remove(location)
}

// ReadObject reads an object written by WriteObject.
func ReadObject(ctx context.Context, tbl *table.Table, location string) ([]byte, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	if r, ok := fs.(icebergio.ReadFileIO); ok {
		b, err := r.ReadFile(location)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", location, err)
		}
		return b, nil
	}
	f, err := fs.Open(location)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", location, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("read %s: %w", location, err)
	}
	return buf, nil
}
