package models

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Difference is one way two versions differ: Field is what ("params",
// "data", "metrics", ...), Text how ("seed: 1 -> 2").
type Difference struct {
	Field string `json:"field"`
	Text  string `json:"text"`
}

// VersionDiff is what differs between versions A and B of a model, and
// the fields that are the same in both (Same) or unknown for one of them
// (Unknown: a version registered without provenance).
type VersionDiff struct {
	A           string       `json:"a"`
	B           string       `json:"b"`
	Differences []Difference `json:"differences"`
	Same        []string     `json:"same"`
	// Shared are the upstream nodes whose result both versions were made
	// from (the same run computed it: a rerun reused it).
	Shared  []string `json:"shared,omitempty"`
	Unknown []string `json:"unknown,omitempty"`
}

// Diff compares what two versions were made of: the run and its logical
// date, the spec's digest, the retrain release, the params, the data
// snapshots, the upstream nodes' content keys and the runs that computed
// them, the artifact files, the metrics and the labels.
func Diff(a, b Version) VersionDiff {
	d := VersionDiff{A: a.Ref(), B: b.Ref()}
	field := func(name, va, vb string) {
		switch {
		case va == "" && vb == "":
			d.Unknown = append(d.Unknown, name)
		case va == vb:
			d.Same = append(d.Same, name)
		default:
			d.add(name, fmt.Sprintf("%s -> %s", cmp.Or(va, "(none)"), cmp.Or(vb, "(none)")))
		}
	}
	pa, pb := cmp.Or(a.Provenance, &Provenance{}), cmp.Or(b.Provenance, &Provenance{})
	field("run", a.PipelineRun, b.PipelineRun)
	field("trained for", a.LogicalTime, b.LogicalTime)
	field("pipeline", pa.Pipeline, pb.Pipeline)
	field("spec", pa.SpecDigest, pb.SpecDigest)
	field("retrain", pa.Retrain, pb.Retrain)
	if a.Provenance == nil || b.Provenance == nil {
		d.Unknown = append(d.Unknown, "params")
	} else {
		d.mapDiff("params", pa.Params, pb.Params)
	}
	d.listDiff("data", a.DataSnapshots, b.DataSnapshots)
	d.upstreamDiff(pa, pb)
	d.filesDiff(a.Files, b.Files)
	d.metricsDiff(a.Metrics, b.Metrics)
	la, lb := map[string]any{}, map[string]any{}
	for k, v := range a.Labels {
		la[k] = v
	}
	for k, v := range b.Labels {
		lb[k] = v
	}
	d.mapDiff("labels", la, lb)
	return d
}

func (d *VersionDiff) add(field, text string) {
	d.Differences = append(d.Differences, Difference{Field: field, Text: text})
}

// mapDiff compares two maps key by key, values as JSON.
func (d *VersionDiff) mapDiff(field string, a, b map[string]any) {
	keys := slices.Sorted(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	n := len(d.Differences)
	for _, k := range keys {
		va, inA := a[k]
		vb, inB := b[k]
		ja, jb := jsonText(va), jsonText(vb)
		switch {
		case !inA:
			d.add(field, fmt.Sprintf("%s: (none) -> %s", k, jb))
		case !inB:
			d.add(field, fmt.Sprintf("%s: %s -> (none)", k, ja))
		case ja != jb:
			d.add(field, fmt.Sprintf("%s: %s -> %s", k, ja, jb))
		}
	}
	if len(d.Differences) == n {
		d.Same = append(d.Same, field)
	}
}

// listDiff compares two lists as sets: what only A has, what only B has.
func (d *VersionDiff) listDiff(field string, a, b []string) {
	var onlyA, onlyB []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			onlyA = append(onlyA, s)
		}
	}
	for _, s := range b {
		if !slices.Contains(a, s) {
			onlyB = append(onlyB, s)
		}
	}
	switch {
	case len(a) == 0 && len(b) == 0:
		d.Unknown = append(d.Unknown, field)
	case len(onlyA) == 0 && len(onlyB) == 0:
		d.Same = append(d.Same, field)
	default:
		for _, s := range onlyA {
			d.add(field, "- "+s)
		}
		for _, s := range onlyB {
			d.add(field, "+ "+s)
		}
	}
}

// upstreamDiff compares the nodes upstream of the registering node: a
// content key that differs, a node one version has and the other not;
// and notes in Shared which nodes' results came from the same run in
// both (a rerun's reused nodes).
func (d *VersionDiff) upstreamDiff(a, b *Provenance) {
	if len(a.Upstream) == 0 && len(b.Upstream) == 0 {
		d.Unknown = append(d.Unknown, "upstream")
		return
	}
	byNode := map[string]Origin{}
	for _, o := range b.Upstream {
		byNode[o.Node] = o
	}
	n := len(d.Differences)
	for _, oa := range a.Upstream {
		ob, ok := byNode[oa.Node]
		delete(byNode, oa.Node)
		switch {
		case !ok:
			d.add("upstream", fmt.Sprintf("%s: only in %s", oa.Node, "A"))
		case oa.Key != "" && ob.Key != "" && oa.Key != ob.Key:
			d.add("upstream", fmt.Sprintf("%s: key %s -> %s", oa.Node, shortKey(oa.Key), shortKey(ob.Key)))
		case oa.Run != "" && oa.Run == ob.Run:
			d.Shared = append(d.Shared, oa.Node)
		}
	}
	for _, o := range b.Upstream {
		if _, ok := byNode[o.Node]; ok {
			d.add("upstream", fmt.Sprintf("%s: only in %s", o.Node, "B"))
		}
	}
	if len(d.Differences) == n {
		d.Same = append(d.Same, "upstream")
	}
}

// filesDiff compares the artifact files by path and content.
func (d *VersionDiff) filesDiff(a, b []Artifact) {
	byPath := map[string]Artifact{}
	for _, f := range b {
		byPath[f.Path] = f
	}
	n := len(d.Differences)
	for _, fa := range a {
		fb, ok := byPath[fa.Path]
		delete(byPath, fa.Path)
		switch {
		case !ok:
			d.add("files", "- "+fa.Path)
		case fa.SHA256 != fb.SHA256:
			d.add("files", fmt.Sprintf("%s: sha256 %s -> %s", fa.Path, shortKey(fa.SHA256), shortKey(fb.SHA256)))
		}
	}
	for _, f := range b {
		if _, ok := byPath[f.Path]; ok {
			d.add("files", "+ "+f.Path)
		}
	}
	if len(d.Differences) == n {
		d.Same = append(d.Same, "files")
	}
}

// metricsDiff compares the recorded metrics, with B's change.
func (d *VersionDiff) metricsDiff(a, b map[string]float64) {
	keys := slices.Sorted(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	n := len(d.Differences)
	for _, k := range keys {
		va, inA := a[k]
		vb, inB := b[k]
		switch {
		case !inA:
			d.add("metrics", fmt.Sprintf("%s: (none) -> %s", k, num(vb)))
		case !inB:
			d.add("metrics", fmt.Sprintf("%s: %s -> (none)", k, num(va)))
		case va != vb:
			d.add("metrics", fmt.Sprintf("%s: %s -> %s (%+.4g)", k, num(va), num(vb), vb-va))
		}
	}
	if len(keys) == 0 {
		d.Unknown = append(d.Unknown, "metrics")
	} else if len(d.Differences) == n {
		d.Same = append(d.Same, "metrics")
	}
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// shortKey cuts a digest to what tells two apart in a line.
func shortKey(s string) string {
	if len(s) > 19 {
		return s[:19] + "…"
	}
	return s
}

// TrainedOn reports whether v records snapshot id of table among its
// data snapshots: an entry "TABLE@ID" of that table, or a bare ID (ids
// are random 63-bit numbers, so a bare one names one snapshot). An empty
// table matches any.
func TrainedOn(v Version, table string, id int64) bool {
	for _, s := range v.DataSnapshots {
		got, ok := SnapshotIDOf(s)
		if !ok || got != id {
			continue
		}
		at := strings.LastIndexByte(s, '@')
		if table == "" || at < 0 || strings.TrimSpace(s[:at]) == table {
			return true
		}
	}
	return false
}

// ParseTableSnapshot reads "TABLE@ID" (or a bare "ID") as the table and
// snapshot id `model list --trained-on` asks for.
func ParseTableSnapshot(s string) (table string, id int64, err error) {
	s = strings.TrimSpace(s)
	idText := s
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		table, idText = strings.TrimSpace(s[:at]), s[at+1:]
	}
	id, err = strconv.ParseInt(strings.TrimSpace(idText), 10, 64)
	if err != nil || id <= 0 {
		return "", 0, fmt.Errorf("%q: want TABLE@SNAPSHOT_ID (or a snapshot id), e.g. ml.training@4242", s)
	}
	return table, id, nil
}
