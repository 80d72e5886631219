package split

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/retrain-ml/retrain/internal/backfill"
)

// hivePart is one key=value folder of a file's path (Hive-style
// partitioning): the value of column key for every row of the file.
type hivePart struct{ Key, Value string }

// hiveParts are the key=value folders of a file's path, outermost first.
// The file's own name is not a folder; a %XX escape in a value is
// decoded, as Hive writes them.
func hiveParts(name string) []hivePart {
	segs := strings.Split(filepath.ToSlash(name), "/")
	var out []hivePart
	for _, seg := range segs[:len(segs)-1] {
		k, v, ok := strings.Cut(seg, "=")
		if !ok || k == "" || v == "" {
			continue
		}
		if u, err := url.PathUnescape(v); err == nil {
			v = u
		}
		out = append(out, hivePart{Key: k, Value: v})
	}
	return out
}

// partValue is the value of key in parts.
func partValue(parts []hivePart, key string) (string, bool) {
	for _, p := range parts {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// folderDay is the date a file's <col>=YYYY-MM-DD folder says its rows
// have: ok false when the path has no such folder, an error naming the
// folder when its value is not a date.
func folderDay(name, col string) (backfill.Day, bool, error) {
	v, ok := partValue(hiveParts(name), col)
	if !ok {
		return 0, false, nil
	}
	d, err := backfill.ParseDay(v)
	if err != nil {
		return 0, false, fmt.Errorf("%w: folder %s=%s/ of %s: the date column's folder value must be YYYY-MM-DD", errSplitInput, col, v, name)
	}
	return d, true, nil
}

// partitionField is the column a key=value folder reads as: the date
// column as a DATE, any other key as a string.
func partitionField(key, dateCol string) arrow.Field {
	if key == dateCol {
		return arrow.Field{Name: key, Type: arrow.FixedWidthTypes.Date32, Nullable: true}
	}
	return arrow.Field{Name: key, Type: arrow.BinaryTypes.String, Nullable: true}
}

// partitionColumn is n rows of a folder's value, as partitionField types
// it (the date column's value is checked by folderDay before any row is
// read).
func partitionColumn(f arrow.Field, value string, n int) (arrow.Array, error) {
	switch f.Type.ID() {
	case arrow.DATE32:
		d, err := backfill.ParseDay(value)
		if err != nil {
			return nil, err
		}
		b := array.NewDate32Builder(memory.DefaultAllocator)
		defer b.Release()
		b.Reserve(n)
		for range n {
			b.UnsafeAppend(arrow.Date32(d))
		}
		return b.NewArray(), nil
	default:
		b := array.NewStringBuilder(memory.DefaultAllocator)
		defer b.Release()
		b.Reserve(n)
		b.ReserveData(n * len(value))
		for range n {
			b.Append(value)
		}
		return b.NewArray(), nil
	}
}
