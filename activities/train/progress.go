// Package train is the `train` node type: it trains a candidate model on a
// split, with the builtin pure-Go trainer or a command, and resumes a retried
// attempt from its last checkpoint.
package train

import (
	"context"
	"fmt"

	"github.com/retrain-ml/retrain/activities/internal/objects"

	"go.temporal.io/sdk/activity"

	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/internal/shard"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// maxCurvePoints bounds the loss curve kept for the report.
const maxCurvePoints = 2000

// TrainProgress is a train node's heartbeat: the latest step and the last
// checkpoint, so that a retried attempt resumes there.
type TrainProgress struct {
	Step int64 `json:"step"`
	// Total is the step training ends at when it is known before it
	// starts (the builtin trainer: epochs × rows / batch, or steps), so
	// `retrain status --follow` draws a bar and an ETA; 0 when unknown.
	Total          int64  `json:"total,omitempty"`
	Checkpoint     string `json:"checkpoint,omitempty"`
	CheckpointStep int64  `json:"checkpoint_step,omitempty"`
	// Ranks are the steps and pace of the ranks that print progress
	// (every rank of a gang's host that does), for the hang watch's view
	// and per-host throughput.
	Ranks []gang.RankProgress `json:"ranks,omitempty"`
	// Shards is where the checkpoint stands in the ranks' shares of the
	// training data (shard_data, when the trainer says): a gang resumed
	// with another world size trains the rest of that epoch.
	Shards *shard.Position `json:"shards,omitempty"`
}

// CurvePoint is one point of a loss curve.
type CurvePoint struct {
	Step           int64   `json:"step"`
	Loss           float64 `json:"loss"`
	EmbMaxNorm     float64 `json:"emb_max_norm,omitempty"`
	ExamplesPerSec float64 `json:"examples_per_sec,omitempty"`
}

// record adds a progress point to the curve and heartbeats it.
func (r *trainRun) record(ctx context.Context, p trainer.Progress) {
	r.addPoint(p)
	r.beat(ctx, p.Step, p.CheckpointURI)
}

func (r *trainRun) addPoint(p trainer.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.curve = append(r.curve, CurvePoint{Step: p.Step, Loss: p.Loss, EmbMaxNorm: p.EmbMaxNorm, ExamplesPerSec: p.ExamplesPerSec})
	if len(r.curve) > maxCurvePoints {
		r.curve = thin(r.curve)
	}
}

// setTotal records the step training will end at, for the heartbeats.
func (r *trainRun) setTotal(total int64) {
	r.mu.Lock()
	r.last.Total = total
	r.mu.Unlock()
}

// beat heartbeats the latest step and, if one was saved there, checkpoint.
func (r *trainRun) beat(ctx context.Context, step int64, ckpt string) {
	r.mu.Lock()
	r.last.Step = step
	if ckpt != "" {
		r.last.Checkpoint, r.last.CheckpointStep = ckpt, step
	}
	hb := r.last
	r.mu.Unlock()
	if r.watch != nil {
		if ranks := r.watch.Progress(); len(ranks) > 0 {
			hb.Ranks = ranks
		}
	}
	nodetype.RecordProgress(ctx, hb)
}

// thin halves a curve, keeping its last point.
func thin(c []CurvePoint) []CurvePoint {
	out := c[:0]
	for i := range c {
		if i%2 == 0 || i == len(c)-1 {
			out = append(out, c[i])
		}
	}
	return out
}

// saveCurve stores the curve so far; a resumed attempt continues it.
func (r *trainRun) saveCurve(ctx context.Context) (string, error) {
	r.mu.Lock()
	curve := append([]CurvePoint(nil), r.curve...)
	r.mu.Unlock()
	if err := objects.PutJSON(ctx, r.t.Store, r.curveKey(), curve); err != nil {
		return "", fmt.Errorf("save the loss curve: %w", err)
	}
	return objects.KeyURI(r.t.Store, r.curveKey()), nil
}

// storedCurve returns the curve an earlier attempt saved, if any.
func (r *trainRun) storedCurve(ctx context.Context) []CurvePoint {
	var curve []CurvePoint
	if err := objects.GetJSON(ctx, r.t.Store, r.curveKey(), &curve); err != nil {
		return nil
	}
	return curve
}

// prepend puts the points of an earlier attempt up to step before the
// curve recorded so far.
func (r *trainRun) prepend(prior []CurvePoint, upTo int64) {
	var head []CurvePoint
	for _, p := range prior {
		if p.Step <= upTo {
			head = append(head, p)
		}
	}
	r.mu.Lock()
	r.curve = append(head, r.curve...)
	r.mu.Unlock()
}

// loadCurve restores the curve of an earlier attempt up to step.
func (r *trainRun) loadCurve(ctx context.Context, upTo int64) {
	r.prepend(r.storedCurve(ctx), upTo)
}

// earlier returns the progress an earlier attempt heartbeated, if any.
func earlier(ctx context.Context) (TrainProgress, bool) {
	var p TrainProgress
	if !activity.HasHeartbeatDetails(ctx) || activity.GetHeartbeatDetails(ctx, &p) != nil {
		return TrainProgress{}, false
	}
	return p, true
}
