package dataset

import (
	"slices"
	"strings"
	"testing"
)

// TestCoverageCountsNullsPerFeature: a null dense value and a null list are
// missing; an empty list is a value (no recent ads), not a missing one.
func TestCoverageCountsNullsPerFeature(t *testing.T) {
	s, err := Infer(tableSchema, "label", "date", "request_id", []string{"activity"}, []string{"user_id", "recent"}, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t)
	defer rec.Release()
	rows, err := NewConverter(s).Rows(rec)
	if err != nil {
		t.Fatal(err)
	}
	cov := NewCoverage(s)
	for _, r := range rows {
		cov.Add(r)
	}
	if cov.Rows() != 3 {
		t.Fatalf("rows %d", cov.Rows())
	}
	// Rows: {activity 0.5, recent [1 2]}, {null, null}, {2, []}.
	want := map[string]float64{"activity": 1.0 / 3, "user_id": 0, "recent": 1.0 / 3}
	for i, c := range s.Columns {
		if got := cov.NullRate(i); got != want[c.Name] {
			t.Errorf("%s: null rate %v, want %v", c.Name, got, want[c.Name])
		}
	}
	if got := cov.CompleteRate(); got != 2.0/3 {
		t.Errorf("complete rate %v, want 2/3", got)
	}
}

// TestCoverageMerge: counting rows in parts and merging the parts' counts
// gives the counts of one pass over all of them.
func TestCoverageMerge(t *testing.T) {
	s, err := Infer(tableSchema, "label", "date", "request_id", []string{"activity"}, []string{"user_id", "recent"}, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t)
	defer rec.Release()
	rows, err := NewConverter(s).Rows(rec)
	if err != nil {
		t.Fatal(err)
	}
	whole, a, b := NewCoverage(s), NewCoverage(s), NewCoverage(s)
	for i, r := range rows {
		whole.Add(r)
		if i == 0 {
			a.Add(r)
		} else {
			b.Add(r)
		}
	}
	merged := NewCoverage(s)
	for _, part := range []*Coverage{a, b} {
		if err := merged.Merge(part.Counts()); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := merged.Counts(), whole.Counts(); got.Rows != want.Rows || got.Complete != want.Complete || !slices.Equal(got.Nulls, want.Nulls) {
		t.Errorf("merged counts %+v, want %+v", got, want)
	}
	if err := merged.Merge(CoverageCounts{Nulls: []int64{1}}); err == nil {
		t.Error("merged the counts of another schema")
	}
}

func TestCoverageViolationsNameFeatureRateAndLimit(t *testing.T) {
	s := Schema{Label: "label", Date: "date", Columns: []Column{{Name: "a", Kind: Dense}, {Name: "b", Kind: Dense}}}
	train, eval := NewCoverage(s), NewCoverage(s)
	for i := range 10 {
		var nulls []uint64
		if i < 6 {
			nulls = []uint64{1} // a is null in 6 of 10 training rows
		}
		train.Add(Row{nulls: nulls})
	}
	for range 4 {
		eval.Add(Row{nulls: []uint64{2}}) // b is null in every held-out row
	}
	lim := Limits{Default: 0.5, PerFeature: map[string]float64{"b": 1}}
	if err := lim.Check(s); err != nil {
		t.Fatal(err)
	}
	r := Report(s, train, eval, lim)
	v := r.Violations(10, 4, Window{"2026-11-01", "2026-11-03"}, Window{"2026-11-04", "2026-11-04"})
	if len(v) != 1 || v[0] != "feature a is null in 60.0% of the 10 training rows (2026-11-01..2026-11-03), above max_null_rate 0.5" {
		t.Fatalf("violations %q", v)
	}
	// Without the override, b fails on the held-out rows too.
	r = Report(s, train, eval, Limits{Default: 0.5})
	v = r.Violations(10, 4, Window{"2026-11-01", "2026-11-03"}, Window{"2026-11-04", "2026-11-04"})
	if len(v) != 2 || !strings.Contains(v[1], "feature b is null in 100.0% of the 4 held-out rows (2026-11-04)") {
		t.Fatalf("violations %q", v)
	}
}

func TestLimitsCheck(t *testing.T) {
	s := Schema{Columns: []Column{{Name: "a", Kind: Dense}}}
	for _, c := range []struct {
		lim  Limits
		want string
	}{
		{Limits{Default: 1.5}, "max_null_rate 1.5 is not between 0 and 1"},
		{Limits{Default: 0.5, PerFeature: map[string]float64{"a": -1}}, "max_null_rates: a: -1 is not between 0 and 1"},
		{Limits{Default: 0.5, PerFeature: map[string]float64{"zz": 0.1}}, "max_null_rates: zz is not a dense or sparse feature"},
	} {
		if err := c.lim.Check(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.lim, err, c.want)
		}
	}
}
