// Package hivepath reads Hive-style partition folders (key=value path
// segments, as Spark, Hive and most lakes' exports write them) as columns:
// which folders a file's path holds, the column each becomes and that
// column's values for a batch of the file's rows. split reads Parquet
// folders with it, and `retrain table import` loads them.
package hivepath

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Part is one key=value folder of a file's path: the value of column Key
// for every row of the file.
type Part struct{ Key, Value string }

// Parts are the key=value folders of a file's path, outermost first. The
// file's own name is not a folder; a %XX escape in a value is decoded, as
// Hive writes them.
func Parts(name string) []Part {
	segs := strings.Split(filepath.ToSlash(name), "/")
	var out []Part
	for _, seg := range segs[:len(segs)-1] {
		k, v, ok := strings.Cut(seg, "=")
		if !ok || k == "" || v == "" {
			continue
		}
		if u, err := url.PathUnescape(v); err == nil {
			v = u
		}
		out = append(out, Part{Key: k, Value: v})
	}
	return out
}

// Value is the value of key in parts.
func Value(parts []Part, key string) (string, bool) {
	for _, p := range parts {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// Field is the column a key=value folder reads as: the date column as a
// DATE, any other key as a string.
func Field(key, dateCol string) arrow.Field {
	if key == dateCol {
		return arrow.Field{Name: key, Type: arrow.FixedWidthTypes.Date32, Nullable: true}
	}
	return arrow.Field{Name: key, Type: arrow.BinaryTypes.String, Nullable: true}
}

// ParseDate is a date folder's value as days since the Unix epoch.
func ParseDate(value string) (arrow.Date32, error) {
	t, err := time.Parse(time.DateOnly, value)
	if err != nil {
		return 0, fmt.Errorf("date %q: want YYYY-MM-DD", value)
	}
	return arrow.Date32(t.Unix() / 86400), nil
}

// Column is n rows of a folder's value, typed as Field types it.
func Column(f arrow.Field, value string, n int) (arrow.Array, error) {
	switch f.Type.ID() {
	case arrow.DATE32:
		d, err := ParseDate(value)
		if err != nil {
			return nil, err
		}
		b := array.NewDate32Builder(memory.DefaultAllocator)
		defer b.Release()
		b.Reserve(n)
		for range n {
			b.UnsafeAppend(d)
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
