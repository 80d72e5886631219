package split

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"

	"github.com/parquet-go/parquet-go"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// Data is a split checkpoint as train and evaluate nodes read it.
type Data struct {
	ManifestKey string
	Manifest    checkpoint.Manifest
	Record      Record
}

// Open reads the manifest of the split at uri (a split node's `uri`
// output) and the schema recorded with it.
func Open(ctx context.Context, store *s3store.Store, uri string) (*Data, error) {
	if uri == "" {
		return nil, nodetype.Permanent(errtype.BadInput, "data: give the split to read, e.g. ${nodes.split.outputs.uri}")
	}
	key, err := objects.StoreKey(store, uri)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "data: %v", err)
	}
	var s Data
	s.ManifestKey = key
	if err := objects.GetJSON(ctx, store, key, &s.Manifest); err != nil {
		return nil, objects.StoreError("data: read the split's manifest", err)
	}
	if err := json.Unmarshal(s.Manifest.Outputs, &s.Record); err != nil || len(s.Record.Schema.Columns) == 0 {
		return nil, nodetype.Permanent(errtype.BadInput, "data: %s is not the checkpoint of a split node", uri)
	}
	for _, name := range []string{TrainDataset, EvalDataset} {
		if _, ok := s.Manifest.Dataset(name); !ok {
			return nil, nodetype.Permanent(errtype.BadInput, "data: the split at %s has no %s dataset", uri, name)
		}
	}
	return &s, nil
}

// Load reads one dataset of the split into memory, sorted by request id
// when the rows have one.
func (s *Data) Load(ctx context.Context, store *s3store.Store, name string) (*dataset.Data, error) {
	var parts []*dataset.Data
	if err := s.Batches(ctx, store, name, func(d *dataset.Data) error {
		parts = append(parts, d)
		return nil
	}); err != nil {
		return nil, err
	}
	return dataset.Combine(s.Record.Schema, parts), nil
}

// BatchRows is how many rows Batches hands over at once.
const BatchRows = 8192

// Batches streams one dataset of the split in file order, BatchRows rows
// at a time, each batch as dataset.LoadRows builds it: what train and
// evaluate read instead of Load, so that their memory does not grow with
// the table.
func (s *Data) Batches(ctx context.Context, store *s3store.Store, name string, fn func(*dataset.Data) error) error {
	r, err := checkpoint.Open[any](ctx, store, checkpoint.Ref{Manifest: s.ManifestKey, Dataset: name})
	if err != nil {
		return fmt.Errorf("read the %s data: %w", name, err)
	}
	defer r.Close()
	// Rows as parquet values, reused batch after batch (a batch's columns
	// are copies): building a map per row (Read into []any) cost five
	// times as much, most of it in the collector (BenchmarkLoad in
	// internal/dataset).
	buf := make([]parquet.Row, BatchRows)
	for {
		n, rerr := r.ReadRows(buf)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("read the %s data: %w", name, rerr)
		}
		if n > 0 {
			d, err := dataset.LoadRows(s.Record.Schema, r.Schema(), buf[:n])
			if err != nil {
				return nodetype.Permanent(errtype.BadInput, "%s data: %v", name, err)
			}
			if err := fn(d); err != nil {
				return err
			}
		}
		if rerr != nil {
			return nil
		}
	}
}

// Rows returns the row count of one dataset, as the manifest records it.
func (s *Data) Rows(name string) int64 {
	ds, _ := s.Manifest.Dataset(name)
	return ds.Rows
}

// Download copies one dataset's Parquet files into dir, for a trainer
// program that reads local files.
func (s *Data) Download(ctx context.Context, store *s3store.Store, name, dir string) error {
	ds, _ := s.Manifest.Dataset(name)
	for _, f := range ds.Files {
		if err := objects.DownloadFile(ctx, store, f.Key, filepath.Join(dir, path.Base(f.Key))); err != nil {
			return fmt.Errorf("download the %s data: %w", name, err)
		}
	}
	return nil
}

// Data formats a trainer or evaluator program can ask for.
const (
	FormatParquet = "parquet" // the split's Parquet files, as the checkpoint holds them
	FormatNPY     = "npy"     // NumPy arrays plus schema.json (dataset.NPYSchema)
)

// Localize writes one dataset of the split into the local folder dir in
// format: the Parquet files as they are, or NumPy arrays that numpy.load
// reads without other libraries (dense float32 features, int64 ids with
// EmbeddingBag offsets, float32 labels, schema.json). It is what a command
// node's RETRAIN_TRAIN_DATA / RETRAIN_EVAL_DATA point at.
func (s *Data) Localize(ctx context.Context, store *s3store.Store, name, dir, format string) error {
	switch format {
	case FormatParquet, "":
		return s.Download(ctx, store, name, dir)
	case FormatNPY:
		d, err := s.Load(ctx, store, name)
		if err != nil {
			return err
		}
		if _, err := d.WriteNPY(dir, s.Record.Schema); err != nil {
			return fmt.Errorf("write the %s data as npy: %w", name, err)
		}
		return nil
	}
	return nodetype.Permanent(errtype.BadInput, "data_format %q: want parquet or npy", format)
}
