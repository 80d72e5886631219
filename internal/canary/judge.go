package canary

import (
	"fmt"
	"math"
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
	// Waiting: not enough events yet, or no data under on_no_data:
	// ignore. Neither passes nor breaches.
	Waiting Status = "waiting"
)

// Judgement is a sample judged against its check.
type Judgement struct {
	Status Status `json:"status"`
	Reason string `json:"reason"`
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
		return Judgement{Status: Waiting, Reason: fmt.Sprintf("%s for the %s (on_no_data: ignore)", what, who)}, false
	}
	return Judgement{Status: Breach, Reason: fmt.Sprintf("the query returned %s for the %s; a check without data fails (on_no_data: fail)", what, who)}, false
}

// Tally is a check's judgements within one step.
type Tally struct {
	Passed   int       `json:"passed"`
	Samples  int       `json:"samples"` // judged samples, waiting ones included
	Last     Judgement `json:"last"`
	Breached bool      `json:"breached"`
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

// StepEnd is a check's verdict when its step's bake ends: it passes only
// if its last evaluation passed and at least min_samples did; anything
// else (too few events, no data under on_no_data: ignore) fails closed.
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
