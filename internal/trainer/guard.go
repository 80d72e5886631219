package trainer

import (
	"fmt"
	"math"
)

// Metric names in a [DivergenceError], as in [Progress]'s JSON.
const (
	MetricLoss       = "loss"
	MetricEmbMaxNorm = "emb_max_norm"
)

// Guard decides when training has diverged. A NaN or infinite loss always
// has; an embedding norm has when it is NaN or above MaxEmbNorm.
type Guard struct {
	// MaxEmbNorm is the largest L2 norm an embedding row may reach; 0
	// checks only that norms are finite. Healthy CTR embeddings stay within
	// single digits; a limit of 100 or so separates them from a blow-up.
	MaxEmbNorm float64
}

// DivergenceError reports that training diverged: at Step, Metric had Value
// beyond Limit (+Inf for the finiteness check). Retrying the same training
// diverges again, so the train node fails without retries.
type DivergenceError struct {
	Step   int64
	Metric string
	Value  float64
	Limit  float64
}

func (e *DivergenceError) Error() string {
	if math.IsInf(e.Limit, 1) {
		return fmt.Sprintf("trainer: diverged at step %d: %s is %v", e.Step, e.Metric, e.Value)
	}
	return fmt.Sprintf("trainer: diverged at step %d: %s %g above the limit %g", e.Step, e.Metric, e.Value, e.Limit)
}

// CheckLoss returns a [*DivergenceError] when loss is NaN or infinite.
func (g Guard) CheckLoss(step int64, loss float64) error {
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return &DivergenceError{Step: step, Metric: MetricLoss, Value: loss, Limit: math.Inf(1)}
	}
	return nil
}

// CheckEmbNorm returns a [*DivergenceError] when norm is NaN, infinite or
// above the limit.
func (g Guard) CheckEmbNorm(step int64, norm float64) error {
	switch {
	case g.MaxEmbNorm > 0 && !(norm <= g.MaxEmbNorm):
		return &DivergenceError{Step: step, Metric: MetricEmbMaxNorm, Value: norm, Limit: g.MaxEmbNorm}
	case math.IsNaN(norm) || math.IsInf(norm, 0):
		return &DivergenceError{Step: step, Metric: MetricEmbMaxNorm, Value: norm, Limit: math.Inf(1)}
	}
	return nil
}

// CheckEvent applies the guard to a command trainer's event: to the figures
// its line carried, nothing for a log line.
func (g Guard) CheckEvent(e Event) error {
	if e.Kind != ProgressEvent {
		return nil
	}
	if e.Has(FieldLoss) {
		if err := g.CheckLoss(e.Progress.Step, e.Progress.Loss); err != nil {
			return err
		}
	}
	if e.Has(FieldEmbMaxNorm) {
		return g.CheckEmbNorm(e.Progress.Step, e.Progress.EmbMaxNorm)
	}
	return nil
}
