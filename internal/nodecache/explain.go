package nodecache

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Diff lists why cur's key differs from prev's, most telling first: the
// type, its version, the cache version, each `with` value, each input.
// cur's labels name the paths. Empty when the keys are equal.
func Diff(prev, cur Components) []string {
	var out []string
	if prev.Type != cur.Type {
		out = append(out, fmt.Sprintf("node type %s -> %s", prev.Type, cur.Type))
	}
	if prev.TypeVersion != cur.TypeVersion {
		out = append(out, fmt.Sprintf("%s version %d -> %d", cur.Type, prev.TypeVersion, cur.TypeVersion))
	}
	if prev.CacheVersion != cur.CacheVersion {
		out = append(out, fmt.Sprintf("cache version %d -> %d", prev.CacheVersion, cur.CacheVersion))
	}
	out = append(out, diffWith(prev.With, cur.With, cur.Labels)...)
	out = append(out, diffInputs(prev.Inputs, cur.Inputs, changedValues(prev.With, cur.With))...)
	return out
}

// changedValues are the values, as read, of the `with` paths that differ
// between a and b: an input named by one of them (the split a changed
// `data` names) is explained by the `with` already.
func changedValues(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, path := range union(a, b) {
		if a[path] != b[path] {
			out[plainString(a[path])] = true
			out[plainString(b[path])] = true
		}
	}
	return out
}

// plainString is a canonical JSON string's text ("" for other values).
func plainString(s string) string {
	var v string
	if json.Unmarshal([]byte(s), &v) != nil {
		return ""
	}
	return v
}

// maxShown bounds a value quoted in a reason.
const maxShown = 40

func short(s string) string {
	s = plain(s)
	if r := []rune(s); len(r) > maxShown {
		return string(r[:maxShown-1]) + "…"
	}
	return s
}

// plain is a canonical value as people read it: a JSON string without
// its quotes when it holds no space and is not empty (2 and "2" then
// read alike, as they do in the spec).
func plain(s string) string {
	var v string
	if strings.HasPrefix(s, `"`) && json.Unmarshal([]byte(s), &v) == nil && v != "" && !strings.ContainsFunc(v, unicode.IsSpace) {
		return v
	}
	return s
}

// shortPair shows two values where they differ: a long pair that shares
// a prefix (two URIs under one folder) is shown from a little before the
// first difference.
func shortPair(a, b string) (string, string) {
	a, b = plain(a), plain(b)
	ra, rb := []rune(a), []rune(b)
	if len(ra) <= maxShown && len(rb) <= maxShown {
		return a, b
	}
	common := 0
	for common < len(ra) && common < len(rb) && ra[common] == rb[common] {
		common++
	}
	cut := func(r []rune) string {
		if start := common - 8; start > 0 {
			r = append([]rune("…"), r[start:]...)
		}
		if len(r) > maxShown {
			r = append(r[:maxShown-1], '…')
		}
		return string(r)
	}
	return cut(ra), cut(rb)
}

// diffWith explains changed `with` values. Paths under one labelled field
// (a param that is a list) are reported once, by the label.
func diffWith(prev, cur map[string]string, labels map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, path := range union(prev, cur) {
		a, inA := prev[path]
		b, inB := cur[path]
		if inA && inB && a == b {
			continue
		}
		name, top := describePath(path, labels)
		if seen[name] {
			continue
		}
		seen[name] = true
		switch {
		case !inA:
			out = append(out, fmt.Sprintf("%s added (%s)", name, short(b)))
		case !inB:
			out = append(out, fmt.Sprintf("%s removed (was %s)", name, short(a)))
		case top:
			sa, sb := shortPair(a, b)
			out = append(out, fmt.Sprintf("%s %s -> %s", name, sa, sb))
		default:
			out = append(out, fmt.Sprintf("%s changed", name))
		}
	}
	return out
}

// describePath names a flattened path: by the label of the path or of the
// top-level field it is under ("param epochs"), else "with.PATH". top says
// the name is the path itself, so its old and new values can be shown.
func describePath(path string, labels map[string]string) (string, bool) {
	if l, ok := labels[path]; ok {
		return l, true
	}
	field := topField(path)
	if l, ok := labels[field]; ok {
		return l, false
	}
	return "with." + path, true
}

// topField is the top-level `with` key of a flattened path.
func topField(path string) string {
	if strings.HasPrefix(path, `"`) {
		for i := 1; i < len(path); i++ {
			if path[i] == '\\' {
				i++
				continue
			}
			if path[i] == '"' {
				return path[:i+1]
			}
		}
		return path
	}
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

// diffInputs explains changed input identities by their kind. An input
// read or no longer read because a `with` value naming it changed
// (named) is left to that value's reason.
func diffInputs(prev, cur map[string]string, named map[string]bool) []string {
	var out []string
	for _, name := range union(prev, cur) {
		a, inA := prev[name]
		b, inB := cur[name]
		if inA && inB && a == b {
			continue
		}
		kind, what, _ := strings.Cut(name, " ")
		if (!inA || !inB) && named[what] {
			continue
		}
		switch {
		case !inA && kind == KindFile:
			out = append(out, what+" added")
		case !inA:
			out = append(out, fmt.Sprintf("now reads %s %s", kind, what))
		case !inB:
			out = append(out, fmt.Sprintf("no longer reads %s %s", kind, what))
		case kind == KindTable:
			sa, sb := shortPair(a, b)
			out = append(out, fmt.Sprintf("%s snapshot %s -> %s", what, sa, sb))
		case kind == KindModel:
			out = append(out, fmt.Sprintf("model %s changed", what))
		case kind == KindEnv:
			out = append(out, fmt.Sprintf("env %s changed", what))
		default:
			out = append(out, what+" changed")
		}
	}
	return out
}

func union(a, b map[string]string) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Reason joins a miss's reasons into one line: the first few and a count
// of the rest.
func Reason(reasons []string) string {
	const shown = 3
	if len(reasons) <= shown {
		return strings.Join(reasons, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(reasons[:shown], "; "), len(reasons)-shown)
}

// Ago says how long before now t was, coarsely: "just now", "5 minutes
// ago", "3 days ago".
func Ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return plural(int(d/time.Minute), "minute") + " ago"
	case d < 48*time.Hour:
		return plural(int(d/time.Hour), "hour") + " ago"
	default:
		return plural(int(d/(24*time.Hour)), "day") + " ago"
	}
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}
