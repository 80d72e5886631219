package split

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"

	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/splitmix"
)

// Checksum is a row count and an order-independent digest of one dataset
// of a split (as lake.Checksum is of a table): two splits with the same
// rows and values, in any order or files, have the same checksum.
type Checksum struct {
	Rows   int64  `json:"rows"`
	Digest string `json:"checksum"`
}

// DatasetChecksum reads one dataset of the split at uri and checksums its
// rows: each row hashed from its JSON encoding (columns in name order),
// summed and xored over rows.
func DatasetChecksum(ctx context.Context, store *s3store.Store, uri, name string) (Checksum, error) {
	d, err := Open(ctx, store, uri)
	if err != nil {
		return Checksum{}, err
	}
	r, err := checkpoint.Open[any](ctx, store, checkpoint.Ref{Manifest: d.ManifestKey, Dataset: name})
	if err != nil {
		return Checksum{}, fmt.Errorf("read the %s data: %w", name, err)
	}
	defer r.Close()
	var sum, xor uint64
	var rows int64
	buf := make([]any, BatchRows)
	for {
		n, rerr := r.Read(buf)
		for _, row := range buf[:n] {
			b, err := json.Marshal(row) // maps marshal with sorted keys
			if err != nil {
				return Checksum{}, fmt.Errorf("%s row %d: %w", name, rows, err)
			}
			h := fnv.New64a()
			h.Write(b)
			x := splitmix.Mix64(h.Sum64())
			sum += x
			xor ^= x
			rows++
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				return Checksum{}, fmt.Errorf("read the %s data: %w", name, rerr)
			}
			break
		}
	}
	return Checksum{Rows: rows, Digest: fmt.Sprintf("%016x%016x", sum, xor)}, nil
}
