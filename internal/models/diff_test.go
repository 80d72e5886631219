package models

import (
	"slices"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	a := Version{Name: "ctr", Version: "v1", Checksum: "sha256:a", Files: []Artifact{{Path: "model.json", SHA256: "aaa"}, {Path: "old.bin", SHA256: "o"}},
		Meta: Meta{PipelineRun: "r1", LogicalTime: "2026-11-04T00:00:00Z", DataSnapshots: []string{"42", "s3://b/split-1"},
			Metrics: map[string]float64{"auc": 0.70, "log_loss": 0.5},
			Provenance: &Provenance{SpecDigest: "sha256:s", Retrain: "0.9.0", Params: map[string]any{"seed": 1.0, "epochs": 2.0},
				Upstream: []Origin{{Node: "promote", Run: "r0"}, {Node: "train", Run: "r1", Key: "k1"}}}}}
	b := Version{Name: "ctr", Version: "v2", Checksum: "sha256:b", Files: []Artifact{{Path: "model.json", SHA256: "bbb"}, {Path: "new.bin", SHA256: "n"}},
		Meta: Meta{PipelineRun: "r2", LogicalTime: "2026-11-04T00:00:00Z", DataSnapshots: []string{"42", "s3://b/split-2"},
			Metrics: map[string]float64{"auc": 0.72, "log_loss": 0.5},
			Provenance: &Provenance{SpecDigest: "sha256:s", Retrain: "0.9.0", Params: map[string]any{"seed": 2.0, "epochs": 2.0},
				Upstream: []Origin{{Node: "promote", Run: "r0"}, {Node: "train", Run: "r2", Key: "k2"}}}}}
	d := Diff(a, b)
	var got []string
	for _, x := range d.Differences {
		got = append(got, x.Field+": "+x.Text)
	}
	want := []string{
		"run: r1 -> r2",
		"params: seed: 1 -> 2",
		"data: - s3://b/split-1",
		"data: + s3://b/split-2",
		"upstream: train: key k1 -> k2",
		"files: model.json: sha256 aaa -> bbb",
		"files: - old.bin",
		"files: + new.bin",
		"metrics: auc: 0.7 -> 0.72 (+0.02)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Equal(d.Shared, []string{"promote"}) {
		t.Errorf("shared %v, want [promote]", d.Shared)
	}
	for _, f := range []string{"trained for", "spec", "retrain"} {
		if !slices.Contains(d.Same, f) {
			t.Errorf("same %v lacks %s", d.Same, f)
		}
	}
	// A version registered by hand records no provenance: unknown, not
	// "the same".
	d = Diff(a, Version{Name: "ctr", Version: "v3", Meta: Meta{Metrics: map[string]float64{"auc": 0.7, "log_loss": 0.5}}})
	if !slices.Contains(d.Differences, Difference{Field: "spec", Text: "sha256:s -> (none)"}) || !slices.Contains(d.Unknown, "params") {
		t.Errorf("against a hand-registered version: %+v", d)
	}
	if len(Diff(a, a).Differences) != 0 {
		t.Errorf("a version differs from itself: %+v", Diff(a, a).Differences)
	}
}

func TestTrainedOn(t *testing.T) {
	v := Version{Meta: Meta{DataSnapshots: []string{"4242", "features.ad_daily@77", "s3://b/split"}}}
	for _, c := range []struct {
		table string
		id    int64
		want  bool
	}{
		{"ml.training", 4242, true}, // a bare id names one snapshot of any table
		{"", 4242, true},
		{"features.ad_daily", 77, true},
		{"ml.training", 77, false}, // another table's snapshot
		{"ml.training", 4243, false},
	} {
		if got := TrainedOn(v, c.table, c.id); got != c.want {
			t.Errorf("TrainedOn(%s@%d) = %v, want %v", c.table, c.id, got, c.want)
		}
	}
	for _, s := range []string{"", "ml.training@", "ml.training@x", "@-3", "ml.training@0"} {
		if _, _, err := ParseTableSnapshot(s); err == nil {
			t.Errorf("ParseTableSnapshot(%q) accepted", s)
		}
	}
	if table, id, err := ParseTableSnapshot("ml.training@4242"); err != nil || table != "ml.training" || id != 4242 {
		t.Errorf("ParseTableSnapshot: %s %d %v", table, id, err)
	}
}
