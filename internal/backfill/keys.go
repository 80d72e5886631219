package backfill

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// keyReader reads the (possibly composite) key of a row. A key of one
// integer-like column is read as an int64, which keeps the hot hash maps
// keyed by integers; anything else is encoded into a string.
type keyReader struct {
	cols []arrow.Array
	ints []func(i int) int64 // one per column; nil for non-integer columns
	buf  []byte
}

func newKeyReader(cols []arrow.Array) (*keyReader, error) {
	if len(cols) == 0 {
		return nil, fmt.Errorf("no key columns")
	}
	k := &keyReader{cols: cols, ints: make([]func(int) int64, len(cols))}
	for c, col := range cols {
		switch a := col.(type) {
		case *array.Int64:
			k.ints[c] = func(i int) int64 { return a.Value(i) }
		case *array.Int32:
			k.ints[c] = func(i int) int64 { return int64(a.Value(i)) }
		case *array.Int16:
			k.ints[c] = func(i int) int64 { return int64(a.Value(i)) }
		case *array.Date32:
			k.ints[c] = func(i int) int64 { return int64(a.Value(i)) }
		case *array.Timestamp:
			k.ints[c] = func(i int) int64 { return int64(a.Value(i)) }
		case *array.String, *array.LargeString, *array.Binary, *array.LargeBinary, *array.Float64, *array.Float32, *array.Boolean:
		default:
			return nil, fmt.Errorf("key column of type %s is not supported", col.DataType())
		}
	}
	return k, nil
}

// intMode reports whether keys are single integers.
func (k *keyReader) intMode() bool { return len(k.cols) == 1 && k.ints[0] != nil }

// null reports whether any part of row i's key is null: such a row never
// matches anything.
func (k *keyReader) null(i int) bool {
	for _, c := range k.cols {
		if c.IsNull(i) {
			return true
		}
	}
	return false
}

func (k *keyReader) int(i int) int64 { return k.ints[0](i) }

// str encodes row i's key. Integer-like columns are encoded as int64 so
// an int32 key on one side matches the same int64 key on the other.
func (k *keyReader) str(i int) string {
	b := k.buf[:0]
	for c, col := range k.cols {
		if f := k.ints[c]; f != nil {
			b = append(b, 'i')
			b = binary.LittleEndian.AppendUint64(b, uint64(f(i)))
			continue
		}
		switch a := col.(type) {
		case *array.String:
			b = appendBytes(b, 's', a.Value(i))
		case *array.LargeString:
			b = appendBytes(b, 's', a.Value(i))
		case *array.Binary:
			b = appendBytes(b, 's', string(a.Value(i)))
		case *array.LargeBinary:
			b = appendBytes(b, 's', string(a.Value(i)))
		case *array.Float64:
			b = append(b, 'f')
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.Value(i)))
		case *array.Float32:
			b = append(b, 'f')
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(a.Value(i))))
		case *array.Boolean:
			if a.Value(i) {
				b = append(b, 'T')
			} else {
				b = append(b, 'F')
			}
		}
	}
	k.buf = b
	return string(b)
}

func appendBytes(b []byte, tag byte, s string) []byte {
	b = append(b, tag)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// describe renders row i's key for error messages.
func (k *keyReader) describe(names []string, i int) string {
	s := ""
	for c, col := range k.cols {
		if c > 0 {
			s += ", "
		}
		name := fmt.Sprintf("key%d", c)
		if c < len(names) {
			name = names[c]
		}
		s += fmt.Sprintf("%s=%s", name, col.ValueStr(i))
	}
	return s
}

// KeyIndex maps the key of each row of a table (one record) to its row.
// Keys must be unique: it is the lookup side of the promotion join, where
// a duplicate key would silently pick one of two feature values.
type KeyIndex struct {
	ints map[int64]int32
	strs map[string]int32
	int  bool
}

// NewKeyIndex indexes the rows of keyCols (named names, for messages).
// Rows with a null key are left out.
func NewKeyIndex(names []string, keyCols []arrow.Array) (*KeyIndex, error) {
	k, err := newKeyReader(keyCols)
	if err != nil {
		return nil, err
	}
	n := keyCols[0].Len()
	ix := &KeyIndex{int: k.intMode()}
	if ix.int {
		ix.ints = make(map[int64]int32, n)
	} else {
		ix.strs = make(map[string]int32, n)
	}
	for i := range n {
		if k.null(i) {
			continue
		}
		if ix.int {
			key := k.int(i)
			if _, dup := ix.ints[key]; dup {
				return nil, fmt.Errorf("duplicate key %s", k.describe(names, i))
			}
			ix.ints[key] = int32(i)
		} else {
			key := k.str(i)
			if _, dup := ix.strs[key]; dup {
				return nil, fmt.Errorf("duplicate key %s", k.describe(names, i))
			}
			ix.strs[key] = int32(i)
		}
	}
	return ix, nil
}

// Len is the number of keys indexed.
func (ix *KeyIndex) Len() int {
	if ix.int {
		return len(ix.ints)
	}
	return len(ix.strs)
}

// Lookup returns, for each row of probe (key columns in the same order and
// of compatible types), the indexed row with the same key, or -1.
func (ix *KeyIndex) Lookup(probe []arrow.Array) ([]int32, error) {
	k, err := newKeyReader(probe)
	if err != nil {
		return nil, err
	}
	if k.intMode() != ix.int {
		return nil, fmt.Errorf("probe key columns do not match the index's key types")
	}
	n := probe[0].Len()
	out := make([]int32, n)
	for i := range n {
		out[i] = -1
		if k.null(i) {
			continue
		}
		var (
			r  int32
			ok bool
		)
		if ix.int {
			r, ok = ix.ints[k.int(i)]
		} else {
			r, ok = ix.strs[k.str(i)]
		}
		if ok {
			out[i] = r
		}
	}
	return out, nil
}
