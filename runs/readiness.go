package runs

import "github.com/retrain-ml/retrain/dags"

// ReadinessActivity is the activity the Pipeline workflow checks one
// wait_for condition with (activities/readiness); its answer is an
// internal/readiness Observation. The worker's guard lets only Pipeline
// runs execute it.
const ReadinessActivity = "RetrainReadinessCheck"

// ReadinessCheck is one check: a condition with its references resolved,
// for the run's logical date.
type ReadinessCheck struct {
	Pipeline    string    `json:"pipeline"`
	RunID       string    `json:"run_id"`
	LogicalDate string    `json:"logical_date"`
	Condition   dags.Wait `json:"condition"`
}

// MetricDataWait is the timer the Pipeline workflow records when a wait
// for data ends (exported as retrain_data_wait_seconds): how long the run,
// or a node, waited; tags pipeline and outcome (ready, not_ready).
const MetricDataWait = "retrain_data_wait"
