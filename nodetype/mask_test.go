package nodetype

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// multiLine is a secret such as a PEM key or a JSON credential: lines of
// its own, a quote, a backslash, HTML characters, and a line ("}") too
// short to mask on its own.
const multiLine = "{\n  \"key\": \"Line0ne-s3cr3t<&>\\x\",\n  \"user\": \"Line-Tw0-user\"\n}"

// secretPieces are the pieces of multiLine no masked text may hold.
var secretPieces = []string{"Line0ne", "s3cr3t", "Line-Tw0", "Tw0-user"}

func assertNoSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, p := range secretPieces {
		if strings.Contains(s, p) {
			t.Errorf("%s %q holds %q", what, s, p)
		}
	}
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestMaskerForms: the value, each line of it, and the forms escaping
// gives them (%q, %+q, JSON, query and path escaping, and a second round
// of quoting) are masked wherever they appear; short lines are not.
func TestMaskerForms(t *testing.T) {
	m := NewMasker([]string{multiLine, ""})
	line1 := `  "key": "Line0ne-s3cr3t<&>\x",`
	cases := map[string]string{
		"raw":               "value: " + multiLine + " end",
		"line by line":      "got " + line1 + "\n",
		"trimmed line":      `key was "key": "Line0ne-s3cr3t<&>\x", ok`,
		"%q":                fmt.Sprintf("parse %q: invalid", multiLine),
		"%+q":               fmt.Sprintf("parse %+q: invalid", multiLine),
		"%q of a line":      fmt.Sprintf("bad line %q", line1),
		"json":              `{"error":` + jsonString(multiLine) + `}`,
		"json of a line":    `{"line":` + jsonString(line1) + `}`,
		"query":             "https://h/p?token=" + url.QueryEscape(multiLine) + "&x=1",
		"path":              "https://h/" + url.PathEscape(multiLine) + "/x",
		"query of a line":   "https://h/p?l=" + url.QueryEscape(line1),
		"%q of %q":          strconv.Quote(fmt.Sprintf("webhook %q", multiLine)),
		"json of %q":        jsonString(fmt.Sprintf("webhook %q", multiLine)),
		"%q of json":        strconv.Quote(`{"x":` + jsonString(multiLine) + `}`),
		"second line alone": `printed "user": "Line-Tw0-user" here`,
	}
	for name, s := range cases {
		got := m.String(s)
		assertNoSecret(t, name, got)
		if !strings.Contains(got, Mask) {
			t.Errorf("%s: %q has no %s", name, got, Mask)
		}
	}
	// "}" is a line of the secret, too short to mask: other text keeps it.
	if got := m.String(`{"ok": true}`); got != `{"ok": true}` {
		t.Errorf("short line masked: %q", got)
	}
	if got := m.String("nothing here"); got != "nothing here" {
		t.Errorf("masked %q", got)
	}
}

// TestMaskerOverlapping: secrets that overlap, or one inside another,
// leave no piece of either; each masked run is one ***.
func TestMaskerOverlapping(t *testing.T) {
	m := NewMasker([]string{"abcdEFGH", "EFGHijkl", "cdEF", "zzzz"})
	for in, want := range map[string]string{
		"x abcdEFGHijkl y":  "x *** y",   // two that overlap
		"x abcdEF y":        "x ab*** y", // the short one alone
		"x cdEFGHijkl y":    "x *** y",   // short one first, long one after
		"zzzzzz":            "***",       // overlapping occurrences of one
		"abcdEFGH EFGHijkl": "*** ***",
	} {
		if got := m.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
	var nilMasker *Masker
	if nilMasker.String("abc") != "abc" || !NewMasker(nil).Empty() || nilMasker.Value(1) != 1 {
		t.Error("an empty masker must mask nothing")
	}
}

// TestMaskerValue: strings and keys in JSON values, and structs through
// their JSON form, are masked; other values stay as they are.
func TestMaskerValue(t *testing.T) {
	m := NewMasker([]string{multiLine})
	type hook struct {
		URL string `json:"url"`
	}
	v := map[string]any{
		"n":       1.5,
		"ok":      true,
		"list":    []any{"pre " + multiLine, fmt.Sprintf("%q", multiLine)},
		"strs":    []string{multiLine},
		"env":     map[string]string{"K": multiLine},
		"hook":    hook{URL: "http://h/?t=" + url.QueryEscape(multiLine)},
		multiLine: "key",
	}
	got := m.Value(v)
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecret(t, "value", string(b))
	if gm := got.(map[string]any); gm["n"] != 1.5 || gm["ok"] != true || gm["***"] != "key" {
		t.Errorf("value %s", b)
	}
}

// TestMaskerDetails: heartbeat details holding a secret come back as
// masked JSON a retry decodes into the same type; others stay as they are.
func TestMaskerDetails(t *testing.T) {
	type progress struct {
		Step int    `json:"step"`
		URI  string `json:"uri"`
	}
	m := NewMasker([]string{multiLine})
	in := []any{progress{Step: 3, URI: "s3://b/" + url.PathEscape(multiLine)}, 7}
	out := m.details(in)
	b, _ := json.Marshal(out)
	assertNoSecret(t, "details", string(b))
	var p progress
	if err := json.Unmarshal(out[0].(json.RawMessage), &p); err != nil || p.Step != 3 {
		t.Errorf("details %s: %v", b, err)
	}
	if out[1] != 7 {
		t.Errorf("details %v", out)
	}
	plain := []any{progress{Step: 1}}
	if got := m.details(plain); got[0] != plain[0] {
		t.Errorf("unchanged details replaced: %v", got)
	}
}
