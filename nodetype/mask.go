package nodetype

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// MinMaskedLine is the shortest line of a multi-line secret that is masked
// on its own. A program or a logger may split a secret at its line breaks
// (a worker logs what a step prints line by line), so each line is masked
// wherever it appears; but a PEM key or a JSON document has lines such as
// "}" or "==" that also occur in any output, and masking those everywhere
// would destroy the output while hiding nothing. The whole value is masked
// whatever its length.
const MinMaskedLine = 4

// Masker hides secret values in text and JSON values: each value, each
// line of a multi-line value (of MinMaskedLine bytes or more, trimmed
// too), and the forms those take once escaped: Go's %q (strconv.Quote and
// QuoteToASCII), a JSON string, url.QueryEscape and url.PathEscape, and a
// second round of %q or JSON escaping on top of those (an error quoted in
// a log line that is itself quoted). Every byte covered by any occurrence
// of any form is replaced, and each run of covered bytes becomes a single
// "***": where forms overlap (a line inside the whole value, two secrets
// sharing text) the longest reach wins and no piece of one is left.
//
// What no masker catches: a value transformed otherwise (base64, hex,
// reversed, hashed, split or cut to a substring shorter than a line).
//
// The nil *Masker and one made of no secrets mask nothing.
type Masker struct {
	forms   []string // longest first
	longest int
}

// Mask is what a masked run of text becomes.
const Mask = "***"

// NewMasker returns a Masker of secrets; empty values are ignored.
func NewMasker(secrets []string) *Masker {
	seen := map[string]bool{}
	var forms []string
	add := func(f string, min int) {
		if len(f) >= max(min, 1) && !seen[f] {
			seen[f] = true
			forms = append(forms, f)
		}
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		for _, p := range parts(s) {
			min := MinMaskedLine
			if p == s {
				min = 1
			}
			for _, f := range escapedForms(p) {
				add(f, min)
			}
		}
	}
	if len(forms) == 0 {
		return nil
	}
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return &Masker{forms: forms, longest: len(forms[0])}
}

// parts are s and, for a multi-line s, its lines (without \r) and their
// trimmed forms.
func parts(s string) []string {
	out := []string{s}
	if !strings.ContainsAny(s, "\r\n") {
		return out
	}
	for line := range strings.SplitSeq(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		for l := range strings.SplitSeq(line, "\r") {
			out = append(out, l, strings.TrimSpace(l))
		}
	}
	return out
}

func quoteInner(s string) string      { q := strconv.Quote(s); return q[1 : len(q)-1] }
func quoteASCIIInner(s string) string { q := strconv.QuoteToASCII(s); return q[1 : len(q)-1] }

// jsonInner is s as escaped inside a JSON string, with HTML characters
// escaped (json.Marshal) or not (an Encoder that does not).
func jsonInner(s string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// escapedForms are p and the forms escaping gives it, once and twice.
func escapedForms(p string) []string {
	once := []string{
		p,
		quoteInner(p), quoteASCIIInner(p),
		jsonInner(p, true), jsonInner(p, false),
		url.QueryEscape(p), url.PathEscape(p),
	}
	out := slices.Clone(once)
	for _, f := range once[1:] {
		out = append(out, quoteInner(f), jsonInner(f, false), jsonInner(f, true))
	}
	return out
}

// Empty reports whether m masks nothing.
func (m *Masker) Empty() bool { return m == nil || len(m.forms) == 0 }

// Longest is the length of the longest form m masks: text cut at most
// that far from a secret's start may hold a piece of it.
func (m *Masker) Longest() int {
	if m == nil {
		return 0
	}
	return m.longest
}

// Contains reports whether s holds any form m masks.
func (m *Masker) Contains(s string) bool {
	if m.Empty() {
		return false
	}
	for _, f := range m.forms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

// String returns s with every occurrence of every form replaced by ***.
func (m *Masker) String(s string) string {
	if m.Empty() || s == "" {
		return s
	}
	type span struct{ start, end int }
	var cover []span
	for _, f := range m.forms {
		if len(f) > len(s) {
			continue
		}
		last := -1 // index in cover of this form's latest span
		for i := 0; i <= len(s)-len(f); {
			j := strings.Index(s[i:], f)
			if j < 0 {
				break
			}
			start := i + j
			if last >= 0 && start <= cover[last].end {
				cover[last].end = start + len(f) // overlapping occurrences of f
			} else {
				cover = append(cover, span{start, start + len(f)})
				last = len(cover) - 1
			}
			i = start + 1
		}
	}
	if len(cover) == 0 {
		return s
	}
	slices.SortFunc(cover, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	at := 0 // s[:at] is written
	for i := 0; i < len(cover); {
		start, end := cover[i].start, cover[i].end
		for i++; i < len(cover) && cover[i].start <= end; i++ {
			end = max(end, cover[i].end)
		}
		b.WriteString(s[at:start])
		b.WriteString(Mask)
		at = end
	}
	b.WriteString(s[at:])
	return b.String()
}

// Value returns v, a JSON value (maps, lists, strings, numbers), with
// its strings and map keys masked. A value of another type (a struct) that
// holds a secret in its JSON form comes back as that form's masked
// decoding (maps, lists, strings, json.Number).
func (m *Masker) Value(v any) any {
	if m.Empty() {
		return v
	}
	switch x := v.(type) {
	case nil, bool, int, int32, int64, uint, uint32, uint64, float32, float64, json.Number:
		return v
	case string:
		return m.String(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[m.String(k)] = m.Value(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = m.Value(e)
		}
		return out
	case []string:
		out := make([]string, len(x))
		for i, e := range x {
			out[i] = m.String(e)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(x))
		for k, e := range x {
			out[m.String(k)] = m.String(e)
		}
		return out
	}
	b, err := json.Marshal(v)
	if err != nil || !m.Contains(string(b)) {
		return v
	}
	var decoded any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&decoded); err != nil {
		return m.String(string(b))
	}
	return m.Value(decoded)
}

// Outputs is Value for a node's outputs.
func (m *Masker) Outputs(out map[string]any) map[string]any {
	if m.Empty() || out == nil {
		return out
	}
	masked, _ := m.Value(out).(map[string]any)
	return masked
}
