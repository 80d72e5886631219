package lake

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/splitmix"
)

// Checksum is a row count and an order-independent digest of every row of
// a table: the sum and the xor of a 64-bit hash of each row. Two scans
// with the same rows (as multisets) and the same columns give the same
// checksum however the rows are split into files or ordered; a changed,
// added, lost or duplicated row changes it (the sum catches duplicates,
// which the xor alone would cancel).
type Checksum struct {
	Rows    int64    `json:"rows"`
	Columns []string `json:"columns"`
	Sum     uint64   `json:"-"`
	Xor     uint64   `json:"-"`
	Digest  string   `json:"checksum"`
}

// TableChecksum scans the table's main branch (all columns of its current
// schema) and checksums it. A table without snapshots has zero rows.
func TableChecksum(ctx context.Context, tbl *table.Table, opts ...table.ScanOption) (Checksum, error) {
	var h RowHasher
	if tbl.CurrentSnapshot() == nil {
		return h.Result(), nil
	}
	_, recs, err := Scan(ctx, tbl, opts...).ToArrowRecords(ctx)
	if err != nil {
		return Checksum{}, fmt.Errorf("scan %s: %w", Name(tbl.Identifier()), err)
	}
	for rec, err := range recs {
		if err != nil {
			return Checksum{}, fmt.Errorf("scan %s: %w", Name(tbl.Identifier()), err)
		}
		err = h.Add(rec)
		rec.Release()
		if err != nil {
			return Checksum{}, err
		}
	}
	return h.Result(), nil
}

// RowHasher accumulates a Checksum over record batches of one schema.
type RowHasher struct {
	sum, xor uint64
	rows     int64
	columns  []string
	hashes   []uint64 // scratch: one per row of the current batch
}

// Add hashes every row of rec. Each value is hashed from a canonical
// encoding of its logical value (integers as int64, floats by their bits
// with -0 and NaNs normalized, strings and binaries with their length,
// lists element by element), mixed with its column's name.
func (h *RowHasher) Add(rec arrow.RecordBatch) error {
	if h.columns == nil {
		for _, f := range rec.Schema().Fields() {
			h.columns = append(h.columns, f.Name)
		}
	}
	n := int(rec.NumRows())
	if cap(h.hashes) < n {
		h.hashes = make([]uint64, n)
	}
	hs := h.hashes[:n]
	for i := range hs {
		hs[i] = 0x9e3779b97f4a7c15
	}
	for c, col := range rec.Columns() {
		if err := hashColumn(col, stringHash(rec.Schema().Field(c).Name), hs); err != nil {
			return fmt.Errorf("column %s: %w", rec.Schema().Field(c).Name, err)
		}
	}
	for _, x := range hs {
		h.sum += x
		h.xor ^= x
	}
	h.rows += int64(n)
	return nil
}

// Result returns the checksum so far.
func (h *RowHasher) Result() Checksum {
	return Checksum{Rows: h.rows, Columns: h.columns, Sum: h.sum, Xor: h.xor,
		Digest: fmt.Sprintf("%016x%016x", h.sum, h.xor)}
}

const nullHash = 0x6a09e667f3bcc908

// hashColumn mixes every value of col into hs. The common fixed-width
// types get a loop of their own; the rest go value by value.
func hashColumn(col arrow.Array, salt uint64, hs []uint64) error {
	fixed := func(v func(i int) uint64) {
		for i := range hs {
			x := uint64(nullHash)
			if !col.IsNull(i) {
				x = v(i)
			}
			hs[i] = splitmix.Mix64(hs[i] ^ splitmix.Mix64(x+salt))
		}
	}
	switch a := col.(type) {
	case *array.Int64:
		fixed(func(i int) uint64 { return uint64(a.Value(i)) })
	case *array.Int32:
		fixed(func(i int) uint64 { return uint64(int64(a.Value(i))) })
	case *array.Date32:
		fixed(func(i int) uint64 { return uint64(int64(a.Value(i))) })
	case *array.Timestamp:
		fixed(func(i int) uint64 { return uint64(int64(a.Value(i))) })
	case *array.Float64:
		fixed(func(i int) uint64 { return floatBits(a.Value(i)) })
	case *array.Float32:
		fixed(func(i int) uint64 { return floatBits(float64(a.Value(i))) })
	default:
		for i := range hs {
			v, err := valueHash(col, i)
			if err != nil {
				return err
			}
			hs[i] = splitmix.Mix64(hs[i] ^ splitmix.Mix64(v+salt))
		}
	}
	return nil
}

func valueHash(col arrow.Array, i int) (uint64, error) {
	if col.IsNull(i) {
		return nullHash, nil
	}
	switch a := col.(type) {
	case *array.Int64:
		return uint64(a.Value(i)), nil
	case *array.Int32:
		return uint64(int64(a.Value(i))), nil
	case *array.Int16:
		return uint64(int64(a.Value(i))), nil
	case *array.Int8:
		return uint64(int64(a.Value(i))), nil
	case *array.Uint64:
		return a.Value(i), nil
	case *array.Uint32:
		return uint64(a.Value(i)), nil
	case *array.Date32:
		return uint64(int64(a.Value(i))), nil
	case *array.Date64:
		return uint64(int64(a.Value(i))), nil
	case *array.Timestamp:
		return uint64(int64(a.Value(i))), nil
	case *array.Time64:
		return uint64(int64(a.Value(i))), nil
	case *array.Boolean:
		if a.Value(i) {
			return 1, nil
		}
		return 2, nil
	case *array.Float64:
		return floatBits(a.Value(i)), nil
	case *array.Float32:
		return floatBits(float64(a.Value(i))), nil
	case *array.String:
		return stringHash(a.Value(i)), nil
	case *array.LargeString:
		return stringHash(a.Value(i)), nil
	case *array.Binary:
		return bytesHash(a.Value(i)), nil
	case *array.LargeBinary:
		return bytesHash(a.Value(i)), nil
	case *array.FixedSizeBinary:
		return bytesHash(a.Value(i)), nil
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		vals := a.ListValues()
		h := uint64(end-start) * 0x100000001b3
		for j := start; j < end; j++ {
			v, err := valueHash(vals, int(j))
			if err != nil {
				return 0, err
			}
			h = splitmix.Mix64(h ^ v)
		}
		return h, nil
	case *array.Struct:
		h := uint64(0x510e527fade682d1)
		for f := 0; f < a.NumField(); f++ {
			v, err := valueHash(a.Field(f), i)
			if err != nil {
				return 0, err
			}
			h = splitmix.Mix64(h ^ v ^ stringHash(a.DataType().(*arrow.StructType).Field(f).Name))
		}
		return h, nil
	default:
		return 0, fmt.Errorf("checksum of %s values is not supported", col.DataType())
	}
}

func floatBits(f float64) uint64 {
	switch {
	case math.IsNaN(f):
		return 0x7ff8000000000001
	case f == 0:
		return 0
	default:
		return math.Float64bits(f)
	}
}

func stringHash(s string) uint64 {
	h := fnv.New64a()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
	return h.Sum64()
}

func bytesHash(b []byte) uint64 { return stringHash(string(b)) }
