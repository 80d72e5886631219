package gate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Force returns a copy of r that passes on a human's word (tfx#4390: a
// failed validation must be overridable, and the override auditable). The
// comparisons and the gate's own Reason are kept as they were, so the
// record shows what was overridden; who and reason are required, and a
// result can be forced once.
func Force(r Result, who, reason string) (Result, error) {
	who, reason = strings.TrimSpace(who), strings.TrimSpace(reason)
	if who == "" {
		return Result{}, errors.New("gate: force: who is required")
	}
	if reason == "" {
		return Result{}, errors.New("gate: force: a reason is required")
	}
	if r.Forced {
		return Result{}, fmt.Errorf("gate: force: already forced by %s (%s)", r.ForcedBy, r.ForceReason)
	}
	r.Comparisons = slices.Clone(r.Comparisons)
	r.Passed = true
	r.Forced = true
	r.ForcedBy = who
	r.ForceReason = reason
	return r, nil
}
