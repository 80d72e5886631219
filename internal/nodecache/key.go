// Package nodecache is the content key of a node execution and the
// explanation of a miss: what a node's result depends on (its type and
// that type's version, its resolved `with`, the content identity of what
// it reads by reference, the spec's cache version), the key those make,
// and, between two sets of components, the reasons they differ
// ("param epochs 2 -> 3", "features.user_daily snapshot A -> B").
//
// Keys are made of content identities, never names: a table is its
// snapshot id, a file its content hash, an object its ETag or checksum.
// The package is pure; entries are stored by the worker (store.go holds
// the format and the lookup logic over any object store).
package nodecache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Components are what one node execution's key is made of. Its JSON form
// is stored with each entry, so the next lookup can say what changed.
type Components struct {
	Type         string `json:"type"`          // node type name
	TypeVersion  int    `json:"type_version"`  // the type's own semantic version
	CacheVersion int    `json:"cache_version"` // the spec's cache: {version: N}
	// With is the node's resolved `with`, flattened to one canonical JSON
	// value per leaf path ("epochs", "transforms.u_activity", "argv[2]").
	With map[string]string `json:"with"`
	// Inputs are the content identities of what the node reads by
	// reference, by input name (Input.Name): a table's snapshot id, a
	// file's hash.
	Inputs map[string]string `json:"inputs"`
	// Labels name `with` paths for people: a path whose value is exactly
	// ${params.NAME} reads "param NAME". Not part of the key.
	Labels map[string]string `json:"labels,omitempty"`
}

// Input kinds: the prefix of an input's name, which says how a change of
// it is explained.
const (
	KindTable  = "table"  // an Iceberg table: identity is a snapshot id
	KindFile   = "file"   // a local file: identity is its content hash
	KindObject = "object" // an object-store object or folder: ETag, version or manifest checksum
	KindModel  = "model"  // a registry model version: its checksum
	KindEnv    = "env"    // an environment variable the node sets: its value's hash
)

// InputName is the Components.Inputs key of an input of kind named name.
func InputName(kind, name string) string { return kind + " " + name }

// Key is the content key: a SHA-256 over the canonical form of c, labels
// left out.
func (c Components) Key() string {
	var b strings.Builder
	b.WriteString("retrain.nodecache.v1\n")
	fmt.Fprintf(&b, "type %q %d\ncache %d\n", c.Type, c.TypeVersion, c.CacheVersion)
	for _, k := range slices.Sorted(maps.Keys(c.With)) {
		fmt.Fprintf(&b, "with %q=%q\n", k, c.With[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.Inputs)) {
		fmt.Fprintf(&b, "input %q=%q\n", k, c.Inputs[k])
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// Flatten turns a resolved `with` into one canonical JSON value per leaf
// path. Maps are walked in key order, lists by index; an empty map or list
// is a leaf of its own ({} or []), so {} and absent differ. Numbers are
// canonical: 2 and 2.0 are the same value (they travel as JSON, where they
// are), and an int64 keeps its digits.
func Flatten(with map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range with {
		flatten(out, escapeKey(k), v)
	}
	return out
}

func flatten(out map[string]string, path string, v any) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			out[path] = "{}"
			return
		}
		for k, e := range x {
			flatten(out, path+"."+escapeKey(k), e)
		}
	case []any:
		if len(x) == 0 {
			out[path] = "[]"
			return
		}
		for i, e := range x {
			flatten(out, fmt.Sprintf("%s[%d]", path, i), e)
		}
	case []string:
		if len(x) == 0 {
			out[path] = "[]"
			return
		}
		for i, e := range x {
			flatten(out, fmt.Sprintf("%s[%d]", path, i), e)
		}
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = e
		}
		flatten(out, path, m)
	default:
		out[path] = canonical(v)
	}
}

// escapeKey keeps a key that holds '.' or '[' from reading as a path.
func escapeKey(k string) string {
	if strings.ContainsAny(k, ".[]\"") || k == "" {
		return strconv.Quote(k)
	}
	return k
}

// canonical is a scalar's JSON form with numbers normalised.
func canonical(v any) string {
	switch x := v.(type) {
	case float64:
		if x == float64(int64(x)) && x < 1e15 && x > -1e15 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return canonical(float64(x))
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return canonical(f)
		}
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%T:%v", v, v)
	}
	return string(b)
}
