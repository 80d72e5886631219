package split

import (
	"context"

	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// The split's steps run as activities of their own (plan, groups,
// manifest), which nodetype.Activity does not wrap: each counts its S3
// use here, and the manifest adds them up into the node's "s3" output,
// the figure a one-activity node gets from nodetype.Activity (the run
// report's S3 column).

// measured runs step with a count of its own S3 requests.
func measured[T any](ctx context.Context, step func(context.Context) (T, error)) (T, s3store.UsageFigures, error) {
	ctx, u := s3store.WithUsage(ctx, "split")
	v, err := step(ctx)
	return v, u.Figures(), err
}

// addUsage adds b's figures to a's.
func addUsage(a, b s3store.UsageFigures) s3store.UsageFigures {
	a.Requests += b.Requests
	a.Bytes += b.Bytes
	a.Wait += b.Wait
	a.WaitMillis = a.Wait.Milliseconds()
	return a
}

// planStep plans a split (see Plan); a split the plan finished itself
// (reused, or of files) gets the plan's S3 use as its own.
func (s *Splits) planStep(ctx context.Context, in nodetype.Input) (*Plan, error) {
	plan, use, err := measured(ctx, func(ctx context.Context) (*Plan, error) { return s.plan(ctx, in) })
	if plan != nil {
		plan.S3 = use
		if plan.Done != nil {
			plan.Done.S3 = nonZero(use)
		}
	}
	return plan, err
}

// groupStep writes group i of plan.
func (s *Splits) groupStep(ctx context.Context, plan *Plan, i int) (GroupResult, error) {
	res, use, err := measured(ctx, func(ctx context.Context) (GroupResult, error) { return s.group(ctx, plan, i) })
	res.S3 = use
	return res, err
}

// manifestStep commits the split; its outputs' S3 figures are the whole
// node's: the plan's, every group's and its own.
func (s *Splits) manifestStep(ctx context.Context, plan *Plan, results []GroupResult) (Outputs, error) {
	out, use, err := measured(ctx, func(ctx context.Context) (Outputs, error) { return s.manifest(ctx, plan, results) })
	if plan != nil {
		use = addUsage(use, plan.S3)
	}
	for _, r := range results {
		use = addUsage(use, r.S3)
	}
	out.S3 = nonZero(use)
	return out, err
}

// nonZero is u, or nil when the step sent no request (no "s3" output, as
// nodetype.Activity leaves it out).
func nonZero(u s3store.UsageFigures) *s3store.UsageFigures {
	if u.Requests == 0 {
		return nil
	}
	return &u
}
