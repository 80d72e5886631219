package errtype

import "testing"

// TestValuesNeverChange pins the strings clients match on: a rename of a
// constant must not touch its value.
func TestValuesNeverChange(t *testing.T) {
	for got, want := range map[string]string{
		PipelineFailed: "PipelineFailed", InvalidPipeline: "InvalidPipeline", NodeFailed: "NodeFailed",
		BadInput: "BadInput", CheckFailed: "CheckFailed", GateRejected: "GateRejected",
		NoObjectStore: "NoObjectStore", ConcurrentMove: "ConcurrentMove", Diverged: "Diverged",
		NoGPUs: "NoGPUs", PromotionContended: "PromotionContended", BadOutput: "BadOutput",
		Refused: "Refused", CanaryRolledBack: "CanaryRolledBack", TableQueueUnavailable: "TableQueueUnavailable",
		OverLimit: "OverLimit", DataNotReady: "DataNotReady",
	} {
		if got != want {
			t.Errorf("error type %q, want %q", got, want)
		}
	}
}
