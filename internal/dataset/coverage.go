package dataset

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Window is an inclusive range of dates, YYYY-MM-DD: the rows a node read.
type Window struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// String formats the window as "start..end" (one date when they are equal).
func (w Window) String() string {
	if w.Start == w.End {
		return w.Start
	}
	return w.Start + ".." + w.End
}

// Coverage counts, per feature column of a schema, the rows in which the
// feature is null. A split keeps one for its training rows and one for its
// held-out rows, so that a feature that is missing where the model learns
// is caught before training starts.
type Coverage struct {
	schema Schema
	rows   int64
	nulls  []int64 // by index in schema.Columns
	// complete counts rows in which no feature is null.
	complete int64
}

// NewCoverage returns an empty count for s's feature columns.
func NewCoverage(s Schema) *Coverage {
	return &Coverage{schema: s, nulls: make([]int64, len(s.Columns))}
}

// Add counts one converted row.
func (c *Coverage) Add(r Row) {
	c.rows++
	if r.nulls == nil {
		c.complete++
		return
	}
	for i := range c.nulls {
		if r.Null(i) {
			c.nulls[i]++
		}
	}
}

// Rows is the number of rows counted.
func (c *Coverage) Rows() int64 { return c.rows }

// NullRate is the share of counted rows in which feature column i is null
// (0 with no rows).
func (c *Coverage) NullRate(i int) float64 {
	if c.rows == 0 {
		return 0
	}
	return float64(c.nulls[i]) / float64(c.rows)
}

// CompleteRate is the share of counted rows with every feature present.
func (c *Coverage) CompleteRate() float64 {
	if c.rows == 0 {
		return 0
	}
	return float64(c.complete) / float64(c.rows)
}

// CoverageCounts is a Coverage's counts as plain JSON, so that the
// counts of parts of a split written apart (its bucket groups, each on
// some worker) add up to the counts of the whole: integer sums, so the
// rates are those one pass over every row gives.
type CoverageCounts struct {
	Rows     int64   `json:"rows"`
	Complete int64   `json:"complete"`
	Nulls    []int64 `json:"nulls"` // by index in the schema's Columns
}

// Counts returns c's counts.
func (c *Coverage) Counts() CoverageCounts {
	return CoverageCounts{Rows: c.rows, Complete: c.complete, Nulls: slices.Clone(c.nulls)}
}

// Merge adds the counts of another part of the rows, made with the same
// schema.
func (c *Coverage) Merge(o CoverageCounts) error {
	if len(o.Nulls) != len(c.nulls) {
		return fmt.Errorf("coverage counts of %d features, want %d", len(o.Nulls), len(c.nulls))
	}
	c.rows += o.Rows
	c.complete += o.Complete
	for i, n := range o.Nulls {
		c.nulls[i] += n
	}
	return nil
}

// FeatureCoverage is one feature's null rates on the rows a split wrote,
// with the limit they were checked against.
type FeatureCoverage struct {
	Feature       string  `json:"feature"`
	Kind          Kind    `json:"kind"`
	TrainNullRate float64 `json:"train_null_rate"`
	EvalNullRate  float64 `json:"eval_null_rate"`
	MaxNullRate   float64 `json:"max_null_rate"`
}

// CoverageReport is what a split says about its features' coverage.
type CoverageReport struct {
	Features []FeatureCoverage `json:"features"`
	// TrainComplete and EvalComplete are the shares of rows with every
	// feature present.
	TrainComplete float64 `json:"train_complete"`
	EvalComplete  float64 `json:"eval_complete"`
}

// Limits are the null-rate limits of a coverage check: Default for every
// feature, PerFeature overriding it by name.
type Limits struct {
	Default    float64
	PerFeature map[string]float64
}

// Of returns the limit for a feature.
func (l Limits) Of(feature string) float64 {
	if v, ok := l.PerFeature[feature]; ok {
		return v
	}
	return l.Default
}

// CheckRates validates the limits' rates: each within 0..1.
func (l Limits) CheckRates() error {
	if !(l.Default >= 0 && l.Default <= 1) {
		return fmt.Errorf("max_null_rate %v is not between 0 and 1", l.Default)
	}
	for _, name := range slices.Sorted(maps.Keys(l.PerFeature)) {
		if v := l.PerFeature[name]; !(v >= 0 && v <= 1) {
			return fmt.Errorf("max_null_rates: %s: %v is not between 0 and 1", name, v)
		}
	}
	return nil
}

// Check validates the limits against a schema: rates within 0..1 and
// overrides naming features of the split.
func (l Limits) Check(s Schema) error {
	if err := l.CheckRates(); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(l.PerFeature)) {
		if !slices.ContainsFunc(s.Columns, func(c Column) bool { return c.Name == name }) {
			return fmt.Errorf("max_null_rates: %s is not a dense or sparse feature of the split", name)
		}
	}
	return nil
}

// Report combines the training and held-out counts into a report.
func Report(s Schema, train, eval *Coverage, limits Limits) CoverageReport {
	r := CoverageReport{TrainComplete: train.CompleteRate(), EvalComplete: eval.CompleteRate()}
	for i, c := range s.Columns {
		r.Features = append(r.Features, FeatureCoverage{
			Feature: c.Name, Kind: c.Kind,
			TrainNullRate: train.NullRate(i), EvalNullRate: eval.NullRate(i),
			MaxNullRate: limits.Of(c.Name),
		})
	}
	return r
}

// Violations lists, for each feature whose null rate on the training or
// the held-out rows is above its limit, a sentence naming the feature, the
// rows, the rate and the limit. trainRows/evalRows and the windows only
// make the sentences concrete.
func (r CoverageReport) Violations(trainRows, evalRows int64, train, eval Window) []string {
	var out []string
	for _, f := range r.Features {
		if f.TrainNullRate > f.MaxNullRate {
			out = append(out, fmt.Sprintf("feature %s is null in %.1f%% of the %d training rows (%s), above max_null_rate %v",
				f.Feature, 100*f.TrainNullRate, trainRows, train, f.MaxNullRate))
		}
		if f.EvalNullRate > f.MaxNullRate {
			out = append(out, fmt.Sprintf("feature %s is null in %.1f%% of the %d held-out rows (%s), above max_null_rate %v",
				f.Feature, 100*f.EvalNullRate, evalRows, eval, f.MaxNullRate))
		}
	}
	return out
}

// Summary is a one-line account of the coverage, for logs.
func (r CoverageReport) Summary() string {
	var parts []string
	for _, f := range r.Features {
		parts = append(parts, fmt.Sprintf("%s %.3f/%.3f", f.Feature, f.TrainNullRate, f.EvalNullRate))
	}
	return "null rates train/eval: " + strings.Join(parts, ", ")
}
