package canary

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/retrain-ml/retrain/internal/gate"
)

// Sample is one evaluation of a check: the values its queries returned.
// A nil value is a query that returned no data.
type Sample struct {
	Time       time.Time `json:"t"`
	Canary     *float64  `json:"canary"`
	Production *float64  `json:"production,omitempty"`
	Count      *float64  `json:"count,omitempty"`
}

// Status is the judgement of one sample.
type Status string

// Statuses of a judged sample.
const (
	// Pass: the value meets the threshold on enough events.
	Pass Status = "pass"
	// Breach: the value breaks the threshold, or (on_no_data: fail) a
	// query returned no data. The canary is rolled back.
	Breach Status = "breach"
	// Waiting: not enough events yet, no data under on_no_data: ignore,
	// or no data in a step's warmup or first min_samples evaluations: the
	// evaluation is inconclusive; it neither passes nor breaches.
	Waiting Status = "waiting"
	// Inconclusive is a step's verdict when a check neither breached nor
	// passed min_samples evaluations by the end of its bake: the canary
	// pauses for a person.
	Inconclusive Status = "inconclusive"
)

// Judgement is a sample judged against its check.
type Judgement struct {
	Status Status `json:"status"`
	Reason string `json:"reason"`
	// NoData: a query returned nothing (or NaN) for the canary or
	// production; a breach of this kind may be excused (Excuse).
	NoData bool `json:"no_data,omitempty"`
}

// Judge judges one sample of c. The threshold is applied by package gate,
// so its direction rules and wording are the gate's.
func Judge(c Check, s Sample) Judgement {
	if j, ok := missing(c, "canary", s.Canary); !ok {
		return j
	}
	if c.Relative() {
		if j, ok := missing(c, "production", s.Production); !ok {
			return j
		}
	}
	if c.CountQuery != "" {
		if s.Count == nil || math.IsNaN(*s.Count) {
			return Judgement{Status: Waiting, Reason: "count_query returned no data"}
		}
		if *s.Count < c.MinCount {
			return Judgement{Status: Waiting, Reason: fmt.Sprintf("%s events of min_count %s", fmtNum(*s.Count), fmtNum(c.MinCount))}
		}
	}
	cfg := gate.Config{Metrics: map[string]gate.Threshold{c.Name: c.Threshold}}
	var base *gate.Baseline
	if c.Relative() {
		base = &gate.Baseline{Version: "production", Metrics: map[string]float64{c.Name: *s.Production}}
	}
	r, err := gate.Evaluate(cfg, gate.Candidate{ID: "canary", Metrics: map[string]float64{c.Name: *s.Canary}}, base)
	if err != nil { // ParseChecks validated the threshold
		return Judgement{Status: Breach, Reason: err.Error()}
	}
	for _, cmp := range r.Comparisons {
		if !cmp.Passed {
			return Judgement{Status: Breach, Reason: cmp.Reason}
		}
	}
	return Judgement{Status: Pass, Reason: r.Comparisons[0].Reason}
}

// missing judges a value a query did not return.
func missing(c Check, who string, v *float64) (Judgement, bool) {
	if v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) {
		return Judgement{}, true
	}
	what := "no data"
	if v != nil {
		what = "value " + fmtNum(*v) // 0/0 of a ratio: NaN
	}
	if c.OnNoData == NoDataIgnore {
		return Judgement{Status: Waiting, Reason: fmt.Sprintf("%s for the %s (on_no_data: ignore)", what, who), NoData: true}, false
	}
	return Judgement{Status: Breach, Reason: fmt.Sprintf("the query returned %s for the %s; a check without data fails (on_no_data: fail)", what, who), NoData: true}, false
}

// Grace says why a check's evaluation at since into its step, its
// evaluated-th of the step (0-based), may lack data without failing: it
// is within the step's warmup, or among its first min_samples
// evaluations. "" when neither holds.
func Grace(c Check, step Step, since time.Duration, evaluated int) string {
	switch {
	case since < step.Warmup:
		return fmt.Sprintf("within the step's warmup of %s", step.Warmup)
	case evaluated < c.MinSamples:
		return fmt.Sprintf("evaluation %d of the step's first min_samples %d", evaluated+1, c.MinSamples)
	}
	return ""
}

// Excuse turns a breach for lack of data into an inconclusive
// evaluation, saying why (Grace); any other judgement stands.
func Excuse(j Judgement, why string) Judgement {
	if why == "" || j.Status != Breach || !j.NoData {
		return j
	}
	return Judgement{Status: Waiting, Reason: fmt.Sprintf("no data yet, inconclusive (%s): %s", why, j.Reason), NoData: true}
}

// Tally is a check's judgements within one step.
type Tally struct {
	Passed       int       `json:"passed"`
	Samples      int       `json:"samples"` // judged samples, waiting ones included
	Breaches     int       `json:"breaches"`
	Inconclusive int       `json:"inconclusive"`
	Last         Judgement `json:"last"`
	Breached     bool      `json:"breached"`
	// Streak are the times of the consecutive breached evaluations up to
	// the last one, carried from step to step (Next): a pass ends it, an
	// inconclusive evaluation neither ends nor extends it.
	Streak []time.Time `json:"streak,omitempty"`
}

// Next is the tally a check starts its next step with: the streak goes on.
func (t Tally) Next() Tally { return Tally{Streak: slices.Clone(t.Streak)} }

// Count counts one judgement of an evaluation at at: the check is
// breached when limit consecutive evaluations were.
func (t *Tally) Count(j Judgement, at time.Time, limit int) {
	t.Samples++
	t.Last = j
	switch j.Status {
	case Pass:
		t.Passed++
		t.Streak = nil
	case Breach:
		t.Breaches++
		t.Streak = append(t.Streak, at)
		if len(t.Streak) >= max(limit, 1) {
			t.Breached = true
		}
	default:
		t.Inconclusive++
	}
}

// Verdict is a check's verdict when its step's bake ends (Count's
// tallies): breached; passed when at least min_samples evaluations
// passed and the breaches since stayed under the failure limit;
// inconclusive otherwise (too little data to say either way).
func Verdict(c Check, t Tally) Judgement {
	counted := fmt.Sprintf("%d evaluations: %d passed, %d breached, %d inconclusive; failure_limit %d", t.Samples, t.Passed, t.Breaches, t.Inconclusive, c.Limit())
	switch {
	case t.Breached:
		return Judgement{Status: Breach, Reason: fmt.Sprintf("%d consecutive breached evaluations (%s): %s", len(t.Streak), counted, t.Last.Reason), NoData: t.Last.NoData}
	case t.Samples == 0:
		return Judgement{Status: Breach, Reason: "not evaluated during the bake (an interval longer than the bake?)"}
	case t.Passed < c.MinSamples:
		return Judgement{Status: Inconclusive, Reason: fmt.Sprintf("%d passing evaluations of min_samples %d when the bake ended (%s); last: %s", t.Passed, c.MinSamples, counted, t.Last.Reason)}
	}
	return Judgement{Status: Pass, Reason: fmt.Sprintf("%s; last: %s", counted, t.Last.Reason)}
}

// Add counts one judgement.
func (t *Tally) Add(j Judgement) {
	t.Samples++
	t.Last = j
	switch j.Status {
	case Pass:
		t.Passed++
	case Breach:
		t.Breached = true
	}
}

// StepEnd is a check's verdict when its step's bake ends, for canaries
// recorded before Count and Verdict (every breach rolled back, an
// inconclusive step failed): it passes only if its last evaluation passed
// and at least min_samples did; anything else (too few events, no data
// under on_no_data: ignore) fails closed.
func StepEnd(c Check, t Tally) Judgement {
	switch {
	case t.Breached:
		return t.Last
	case t.Samples == 0:
		return Judgement{Status: Breach, Reason: "not evaluated during the bake (an interval longer than the bake?)"}
	case t.Last.Status != Pass:
		return Judgement{Status: Breach, Reason: "not enough data when the bake ended: " + t.Last.Reason}
	case t.Passed < c.MinSamples:
		return Judgement{Status: Breach, Reason: fmt.Sprintf("%d passing samples of min_samples %d when the bake ended", t.Passed, c.MinSamples)}
	}
	return Judgement{Status: Pass, Reason: fmt.Sprintf("%d of %d samples passed; last: %s", t.Passed, t.Samples, t.Last.Reason)}
}
