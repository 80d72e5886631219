package models

import (
	"fmt"
	"sync"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
)

// TestBackfillNeverMovesProductionBackwards deploys the models of ten
// dates at once, as a parallel backfill does, in no particular order:
// every version is registered with its date, and production ends on the
// latest date's, whichever finished last. An older date that finds a newer
// one deployed says so and leaves the alias; its compensation has nothing
// to undo; force moves it anyway.
func TestBackfillNeverMovesProductionBackwards(t *testing.T) {
	t.Parallel()
	m, reg, _ := newModels(t)
	ctx := t.Context()
	const n = 10
	outs := make([]DeployOutputs, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		dir := candidate(t, fmt.Sprintf("weights-%d", i))
		in := deployInput(fmt.Sprintf("run-%d", i), "deploy", map[string]any{"model": "ctr", "dir": dir})
		in.LogicalTime = fmt.Sprintf("2026-11-%02dT02:00:00+01:00", 5+i)
		wg.Go(func() { outs[i], errs[i] = runDeploy(ctx, m, in) })
	}
	wg.Wait()
	superseded := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("deploy %d: %v", i, errs[i])
		}
		o := outs[i]
		if want := fmt.Sprintf("2026-11-%02d", 5+i); o.LogicalDate != want {
			t.Errorf("deploy %d: logical date %q, want %q", i, o.LogicalDate, want)
		}
		if o.SupersededBy != "" {
			superseded++
			if o.Moved || o.SupersededDate <= o.LogicalDate || o.PreviousVersion != o.Version || len(o.Webhooks) != 0 {
				t.Errorf("deploy %d superseded: %+v", i, o)
			}
		}
	}
	cur, err := reg.Resolve(ctx, "ctr")
	if err != nil || cur.Version != outs[n-1].Version || cur.LogicalDate() != "2026-11-14" {
		t.Fatalf("production = %s (%s), %v; want %s, the latest date's", cur.Version, cur.LogicalDate(), err, outs[n-1].Version)
	}
	history, err := reg.History(ctx, "ctr", models.DefaultAlias)
	if err != nil {
		t.Fatal(err)
	}
	if len(history)+superseded != n {
		t.Errorf("%d moves and %d superseded deploys, want %d in all", len(history), superseded, n)
	}
	for i := 1; i < len(history); i++ { // every move went forward in time
		from, _ := reg.Get(ctx, "ctr", history[i].From)
		to, _ := reg.Get(ctx, "ctr", history[i].To)
		if to.LogicalTime <= from.LogicalTime {
			t.Errorf("move %d: %s (%s) → %s (%s) went backwards", i, history[i].From, from.LogicalDate(), history[i].To, to.LogicalDate())
		}
	}

	// An older date now: registered, alias left, a summary saying why.
	old := deployInput("run-old", "deploy", map[string]any{"model": "ctr", "dir": candidate(t, "old")})
	old.LogicalTime = "2026-11-01T00:00:00Z"
	o, err := runDeploy(ctx, m, old)
	if err != nil || o.SupersededBy != cur.Version || o.SupersededDate != "2026-11-14" {
		t.Fatalf("older date: %+v, %v", o, err)
	}
	if want := fmt.Sprintf("ctr production left at %s: superseded by %[1]s for 2026-11-14 (%s registered, for 2026-11-01)", cur.Version, o.Version); o.Summary != want {
		t.Errorf("summary %q, want %q", o.Summary, want)
	}
	// Its compensation has nothing to undo and moves nothing.
	rb, err := runRollback(ctx, m, deployInput("run-old", "undo", map[string]any{"model": "ctr", "from": o.Version, "to": o.PreviousVersion}))
	if err != nil || rb.Changed {
		t.Fatalf("compensation of a superseded deploy: %+v, %v", rb, err)
	}
	if now, _ := reg.Resolve(ctx, "ctr"); now.Version != cur.Version {
		t.Fatalf("compensation moved production to %s", now.Version)
	}
	// force: the node says to deploy the older date all the same.
	old.With["force"] = true
	old.RunID = "run-forced"
	forced, err := runDeploy(ctx, m, old)
	if err != nil || !forced.Moved || !forced.Forced || forced.SupersededBy != "" || forced.PreviousVersion != cur.Version {
		t.Fatalf("forced: %+v, %v", forced, err)
	}
	if h, _ := reg.History(ctx, "ctr", models.DefaultAlias); !h[len(h)-1].Forced || h[len(h)-1].Actor.Run != "run-forced" {
		t.Errorf("forced deploy recorded %+v", h[len(h)-1])
	}

	// Compensations: the forced deploy moved production to the older
	// date; its run undoing that move (to a newer date) needs nothing.
	rb, err = runRollback(ctx, m, deployInput("run-forced", "undo", map[string]any{"model": "ctr", "from": forced.Version, "to": forced.PreviousVersion}))
	if err != nil || !rb.Changed || rb.Forced {
		t.Fatalf("own undo: %+v, %v", rb, err)
	}
	// Now production is the newest again: a run's compensation moving it to
	// the older version (which that run did not replace) is refused.
	_, err = runRollback(ctx, m, deployInput("run-other", "undo", map[string]any{"model": "ctr", "to": forced.Version}))
	if nodetest.ErrType(err) != errtype.Superseded {
		t.Fatalf("a compensation to an older date without force: %v, want a Superseded error", err)
	}
	// With force: true it moves, recorded as forced.
	rb, err = runRollback(ctx, m, deployInput("run-other", "undo", map[string]any{"model": "ctr", "to": forced.Version, "force": true}))
	if err != nil || !rb.Changed || !rb.Forced {
		t.Fatalf("forced compensation: %+v, %v", rb, err)
	}
}
