package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

const (
	manifestName   = "manifest.json"
	manifestFormat = 1
)

var (
	// ErrNotFound: there is no complete checkpoint at the given place.
	ErrNotFound = errors.New("checkpoint: not found")
	// ErrCorrupt: stored data disagrees with its manifest (missing file,
	// wrong size, checksum or row count).
	ErrCorrupt = errors.New("checkpoint: corrupt")
)

// Manifest describes a complete checkpoint.
type Manifest struct {
	Format   int       `json:"format"`
	Pipeline string    `json:"pipeline"`
	Run      string    `json:"run"`
	Node     string    `json:"node"`
	Inputs   string    `json:"inputs"`  // the inputs fingerprint
	Attempt  string    `json:"attempt"` // the attempt that wrote the files
	Created  time.Time `json:"created"`
	Rows     int64     `json:"rows"` // over all datasets
	Datasets []Dataset `json:"datasets"`
	// Outputs is the JSON of the step's outputs, returned by Do on a hit.
	Outputs json.RawMessage `json:"outputs"`
}

// Dataset is one named table of a checkpoint.
type Dataset struct {
	Name   string `json:"name"`
	Schema string `json:"schema"` // Parquet schema, in Parquet's text form
	// Columns are the top-level columns in schema order (absent from
	// manifests written before it was recorded).
	Columns []Column `json:"columns,omitempty"`
	Rows    int64    `json:"rows"`
	Files   []File   `json:"files"`
}

// File is one Parquet file of a dataset.
type File struct {
	Key    string `json:"key"` // relative to the Store's prefix
	Rows   int64  `json:"rows"`
	Size   int64  `json:"size"`
	CRC32C string `json:"crc32c"` // base64, as S3 reports it
	// RowGroups are the file's row groups in order, so that a reader can
	// fetch one with a ranged read (absent from manifests written before
	// they were recorded: read the file's footer then).
	RowGroups []RowGroup `json:"row_groups,omitempty"`
}

// RowGroup is one row group of a Parquet file: its rows, and the bytes
// [Offset, Offset+Size) of the file that hold its column chunks.
type RowGroup struct {
	Rows   int64 `json:"rows"`
	Offset int64 `json:"offset"`
	Size   int64 `json:"size"`
}

// HasRowGroups reports whether f records row groups that add up to its
// rows and lie inside it.
func (f File) HasRowGroups() bool {
	if len(f.RowGroups) == 0 {
		return false
	}
	var n int64
	for _, g := range f.RowGroups {
		if g.Rows < 0 || g.Offset < 0 || g.Size < 0 || g.Offset+g.Size > f.Size {
			return false
		}
		n += g.Rows
	}
	return n == f.Rows
}

// Dataset returns the dataset called name.
func (m *Manifest) Dataset(name string) (Dataset, bool) {
	for _, d := range m.Datasets {
		if d.Name == name {
			return d, true
		}
	}
	return Dataset{}, false
}

// Load returns the manifest of the complete checkpoint of key for inputs, or
// an error wrapping ErrNotFound.
func Load(ctx context.Context, store *s3store.Store, key Key, inputs string) (*Manifest, error) {
	if err := key.validate(); err != nil {
		return nil, err
	}
	if err := validateFingerprint(inputs); err != nil {
		return nil, err
	}
	return loadManifest(ctx, store, key.dir(inputs)+manifestName)
}

func loadManifest(ctx context.Context, store *s3store.Store, key string) (*Manifest, error) {
	b, _, err := store.GetBytes(ctx, key)
	if errors.Is(err, s3store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read manifest: %w", err)
	}
	m := new(Manifest)
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w: manifest %s: %v", ErrCorrupt, key, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("checkpoint: manifest %s has format %d, this version reads %d", key, m.Format, manifestFormat)
	}
	return m, nil
}

// verifyFiles checks, with one listing, that every file the manifest names
// exists with its recorded size. Lifecycle expiration removes files by age,
// and the manifest is the youngest object of a checkpoint, so a manifest can
// briefly outlive its files.
func verifyFiles(ctx context.Context, store *s3store.Store, dir string, m *Manifest) error {
	sizes := make(map[string]int64)
	for o, err := range store.List(ctx, dir) {
		if err != nil {
			return fmt.Errorf("checkpoint: list %s: %w", dir, err)
		}
		sizes[o.Key] = o.Size
	}
	for _, d := range m.Datasets {
		for _, f := range d.Files {
			size, ok := sizes[f.Key]
			switch {
			case !ok:
				return fmt.Errorf("%w: %s is missing", ErrCorrupt, f.Key)
			case size != f.Size:
				return fmt.Errorf("%w: %s is %d bytes, manifest says %d", ErrCorrupt, f.Key, size, f.Size)
			}
		}
	}
	return nil
}
