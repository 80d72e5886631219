package features

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// column returns the column of rec named name.
func column(rec arrow.RecordBatch, name string) (arrow.Array, error) {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) != 1 {
		return nil, fmt.Errorf("column %s not in scan output %s", name, rec.Schema())
	}
	return rec.Column(idx[0]), nil
}

func columns(rec arrow.RecordBatch, names []string) ([]arrow.Array, error) {
	out := make([]arrow.Array, len(names))
	for i, n := range names {
		c, err := column(rec, n)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// conform returns arr typed exactly as typ. Scans give arrays typed after
// the table they came from (list element names, field-id metadata); a
// record written to another table must carry that table's types. The
// layouts are the same, so only the type is swapped; typ must be
// layout-compatible with arr's type. The result is a new reference.
func conform(arr arrow.Array, typ arrow.DataType) (arrow.Array, error) {
	if arrow.TypeEqual(arr.DataType(), typ, arrow.CheckMetadata()) {
		arr.Retain()
		return arr, nil
	}
	if arr.DataType().ID() != typ.ID() {
		return nil, fmt.Errorf("cannot write %s values as %s", arr.DataType(), typ)
	}
	data, err := retype(arr.Data(), typ)
	if err != nil {
		return nil, err
	}
	defer data.Release()
	return array.MakeFromData(data), nil
}

func retype(d arrow.ArrayData, typ arrow.DataType) (arrow.ArrayData, error) {
	children := d.Children()
	var childTypes []arrow.DataType
	switch t := typ.(type) {
	case arrow.ListLikeType:
		childTypes = []arrow.DataType{t.Elem()}
	case *arrow.StructType:
		for _, f := range t.Fields() {
			childTypes = append(childTypes, f.Type)
		}
	}
	if len(childTypes) != len(children) {
		return nil, fmt.Errorf("cannot write %s values as %s", d.DataType(), typ)
	}
	newChildren := make([]arrow.ArrayData, len(children))
	for i, c := range children {
		if c.DataType().ID() != childTypes[i].ID() {
			return nil, fmt.Errorf("cannot write %s values as %s", d.DataType(), typ)
		}
		nc, err := retype(c, childTypes[i])
		if err != nil {
			return nil, err
		}
		defer nc.Release()
		newChildren[i] = nc
	}
	return array.NewData(typ, d.Len(), d.Buffers(), newChildren, d.NullN(), d.Offset()), nil
}

// readAll scans into one array per requested column (chunks concatenated),
// for the lookup side of a join. Empty scans give empty arrays.
func readAll(ctx context.Context, mem memory.Allocator, scan *table.Scan, names []string) ([]arrow.Array, int, error) {
	_, recs, err := scan.ToArrowRecords(ctx)
	if err != nil {
		return nil, 0, err
	}
	return collect(mem, recs, names)
}

// readTasks is readAll over given file scan tasks.
func readTasks(ctx context.Context, mem memory.Allocator, scan *table.Scan, tasks []table.FileScanTask, names []string) ([]arrow.Array, int, error) {
	_, recs, err := scan.ReadTasks(ctx, tasks)
	if err != nil {
		return nil, 0, err
	}
	return collect(mem, recs, names)
}

func collect(mem memory.Allocator, recs func(func(arrow.RecordBatch, error) bool), names []string) ([]arrow.Array, int, error) {
	chunks := make([][]arrow.Array, len(names))
	var kept []arrow.RecordBatch
	defer func() {
		for _, r := range kept {
			r.Release()
		}
	}()
	var types []arrow.DataType
	for rec, err := range recs {
		if err != nil {
			return nil, 0, err
		}
		kept = append(kept, rec)
		cols, err := columns(rec, names)
		if err != nil {
			return nil, 0, err
		}
		if types == nil {
			for _, c := range cols {
				types = append(types, c.DataType())
			}
		}
		for i, c := range cols {
			chunks[i] = append(chunks[i], c)
		}
	}
	out := make([]arrow.Array, len(names))
	rows := 0
	for i := range names {
		if len(chunks[i]) == 0 {
			out[i] = nil
			continue
		}
		a, err := array.Concatenate(chunks[i], mem)
		if err != nil {
			for _, o := range out[:i] {
				if o != nil {
					o.Release()
				}
			}
			return nil, 0, fmt.Errorf("concatenate column %s: %w", names[i], err)
		}
		out[i] = a
		rows = a.Len()
	}
	if kept == nil {
		return nil, 0, nil
	}
	return out, rows, nil
}

// maxBatchRows is iceberg-go's default read batch size.
const maxBatchRows = 1 << 17

// batchRows sizes read batches to the files read: the row count of the
// largest, up to the default. A partition's file of 12,500 rows read with
// the default would have its column buffers sized (and zeroed) for
// 131,072 rows.
func batchRows(parts ...[]lake.Partition) int {
	n := 0
	for _, ps := range parts {
		for _, p := range ps {
			for _, t := range p.Tasks {
				n = max(n, int(t.File.Count()))
			}
		}
	}
	if n <= 0 || n > maxBatchRows {
		return maxBatchRows
	}
	return n
}

func release(arrs []arrow.Array) {
	for _, a := range arrs {
		if a != nil {
			a.Release()
		}
	}
}
