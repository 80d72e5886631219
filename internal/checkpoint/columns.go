package checkpoint

import (
	"fmt"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// Column is a top-level column of a dataset, named and typed the way a
// reader of its Parquet files sees it: "int64", "string", "list<int64>",
// "struct<a:int64,b:string>".
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// String returns "name:type".
func (c Column) String() string { return c.Name + ":" + c.Type }

// ColumnsOf lists the top-level columns of schema in schema order. A list
// column is one column with a list type, not the leaf that holds its
// elements (Parquet's text form names that leaf "element").
func ColumnsOf(schema parquet.Node) []Column {
	fields := schema.Fields()
	cols := make([]Column, len(fields))
	for i, f := range fields {
		cols[i] = Column{Name: f.Name(), Type: fieldType(f)}
	}
	return cols
}

// fieldType is the type of a field's values: a repeated field without a
// LIST annotation (legacy Parquet) is a list too.
func fieldType(n parquet.Node) string {
	if n.Repeated() {
		return "list<" + nodeType(n) + ">"
	}
	return nodeType(n)
}

// nodeType names the type of n, ignoring its repetition.
func nodeType(n parquet.Node) string {
	if !n.Leaf() {
		var logical format.LogicalTypeValue
		if lt := n.Type().LogicalType(); lt != nil {
			logical = lt.Value
		}
		switch logical.(type) {
		case *format.ListType:
			if elem, ok := listElement(n); ok {
				return "list<" + nodeType(elem) + ">"
			}
		case *format.MapType:
			if k, v, ok := mapEntry(n); ok {
				return "map<" + nodeType(k) + "," + nodeType(v) + ">"
			}
		}
		// A plain group, or a LIST or MAP not shaped as the Parquet spec
		// says: show what is there.
		var b strings.Builder
		b.WriteString("struct<")
		for i, f := range n.Fields() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(f.Name() + ":" + fieldType(f))
		}
		b.WriteByte('>')
		return b.String()
	}
	t := n.Type()
	if lt := t.LogicalType(); lt != nil {
		switch v := lt.Value.(type) {
		case *format.StringType, *format.EnumType:
			return "string"
		case *format.IntType:
			if v.IsSigned {
				return fmt.Sprintf("int%d", v.BitWidth)
			}
			return fmt.Sprintf("uint%d", v.BitWidth)
		case *format.DecimalType:
			return fmt.Sprintf("decimal(%d,%d)", v.Precision, v.Scale)
		case *format.DateType:
			return "date"
		case *format.TimeType:
			return "time"
		case *format.TimestampType:
			return "timestamp"
		case *format.JsonType:
			return "json"
		case *format.UUIDType:
			return "uuid"
		}
	}
	switch t.Kind() {
	case parquet.Boolean:
		return "boolean"
	case parquet.Int32:
		return "int32"
	case parquet.Int64:
		return "int64"
	case parquet.Int96:
		return "int96"
	case parquet.Float:
		return "float"
	case parquet.Double:
		return "double"
	case parquet.ByteArray:
		return "binary"
	case parquet.FixedLenByteArray:
		return fmt.Sprintf("fixed_len_byte_array(%d)", t.Length())
	}
	return strings.ToLower(t.String())
}

// listElement finds the element of a LIST group, following the Parquet
// spec's rules for lists written by older writers too: the three-level
// form (repeated group list { element }), a repeated leaf, and a repeated
// group of several fields (or named "array" or NAME_tuple), which is the
// element itself.
func listElement(list parquet.Node) (parquet.Node, bool) {
	fields := list.Fields()
	if len(fields) != 1 || !fields[0].Repeated() {
		return nil, false
	}
	rep := fields[0]
	if rep.Leaf() || len(rep.Fields()) != 1 || rep.Name() == "array" || strings.HasSuffix(rep.Name(), "_tuple") {
		return rep, true
	}
	return rep.Fields()[0], true
}

// mapEntry finds the key and value of a MAP group: repeated group
// key_value { key; value }.
func mapEntry(m parquet.Node) (key, value parquet.Node, ok bool) {
	fields := m.Fields()
	if len(fields) != 1 || !fields[0].Repeated() || fields[0].Leaf() {
		return nil, nil, false
	}
	kv := fields[0].Fields()
	if len(kv) != 2 {
		return nil, nil, false
	}
	return kv[0], kv[1], true
}
