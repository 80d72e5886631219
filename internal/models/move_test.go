package models_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/retrain-ml/retrain/internal/models"
)

// dated is a registry with versions of model ctr trained for the given
// logical times ("" for none), named v1, v2, ... in order.
type dated struct {
	t   *testing.T
	reg *models.Registry
}

func newDated(t *testing.T, times ...string) dated {
	t.Helper()
	reg, _ := newRegistry(t)
	for i, lt := range times {
		a := artifacts(t, map[string]string{"w.bin": fmt.Sprintf("weights %d", i)})
		if _, err := reg.Register(t.Context(), "ctr", a, fmt.Sprintf("v%d", i+1), models.Meta{LogicalTime: lt}); err != nil {
			t.Fatal(err)
		}
	}
	return dated{t, reg}
}

func (d dated) production() string {
	d.t.Helper()
	v, err := d.reg.Resolve(d.t.Context(), "ctr@production")
	if err != nil {
		d.t.Fatal(err)
	}
	return v.Version
}

func (d dated) move(req models.MoveRequest) (models.Move, error) {
	req.Model = "ctr"
	if req.Alias == "" {
		req.Alias = "production"
	}
	if req.By == (models.Actor{}) {
		req.By = bot
	}
	return d.reg.Move(d.t.Context(), req)
}

func (d dated) mustMove(req models.MoveRequest) models.Move {
	d.t.Helper()
	m, err := d.move(req)
	if err != nil {
		d.t.Fatalf("move %+v: %v", req, err)
	}
	return m
}

// wantSuperseded checks err is the date rule's refusal naming both
// versions and their dates, and that production did not move.
func (d dated) wantSuperseded(err error, by, byDate, refused, refusedDate string) {
	d.t.Helper()
	sup, ok := errors.AsType[*models.Superseded](err)
	if !ok || !errors.Is(err, models.ErrSuperseded) {
		d.t.Fatalf("err %v, want superseded by %s", err, by)
	}
	if sup.By.Version != by || sup.Version.Version != refused {
		d.t.Errorf("superseded %+v: want by %s, refused %s", sup, by, refused)
	}
	for _, s := range []string{by, byDate, refused, refusedDate, "unless forced"} {
		if !strings.Contains(err.Error(), s) {
			d.t.Errorf("error %q does not say %q", err, s)
		}
	}
	if got := d.production(); got != by {
		d.t.Errorf("production moved to %s", got)
	}
}

const (
	nov09 = "2026-11-09T00:00:00Z"
	nov14 = "2026-11-14T00:00:00Z"
	nov15 = "2026-11-15T00:00:00+01:00" // 2026-11-14T23:00Z: later than nov14
)

// TestMoveDateRulePromote: a promotion (deploy, canary, the CLI's
// promote) never moves production to an older date unless forced; a
// forced move is recorded with who, why and the forced flag.
func TestMoveDateRulePromote(t *testing.T) {
	t.Parallel()
	d := newDated(t, nov14, nov09, nov15, "")
	d.mustMove(models.MoveRequest{To: "v1", Reason: "first"})
	_, err := d.move(models.MoveRequest{To: "v2", Reason: "older date"})
	d.wantSuperseded(err, "v1", "2026-11-14", "v2", "2026-11-09")
	// The short form is the same rule.
	_, err = d.reg.Promote(t.Context(), "ctr", "production", "v2", bot, "older date")
	d.wantSuperseded(err, "v1", "2026-11-14", "v2", "2026-11-09")
	// A compare-and-swap promotion (the canary's) too.
	_, err = d.move(models.MoveRequest{To: "v2", IfFrom: true, From: "v1"})
	d.wantSuperseded(err, "v1", "2026-11-14", "v2", "2026-11-09")
	// CheckMove says the same without moving.
	err = d.reg.CheckMove(t.Context(), models.MoveRequest{Model: "ctr", Alias: "production", To: "v2", By: bot})
	d.wantSuperseded(err, "v1", "2026-11-14", "v2", "2026-11-09")
	if err := d.reg.CheckMove(t.Context(), models.MoveRequest{Model: "ctr", Alias: "production", To: "v3", By: bot}); err != nil {
		t.Errorf("CheckMove to a newer date: %v", err)
	}

	// The same version again is no move and no error; a newer one moves.
	if m := d.mustMove(models.MoveRequest{To: "v1", Reason: "again"}); m.Changed {
		t.Errorf("same version moved: %+v", m)
	}
	if m := d.mustMove(models.MoveRequest{To: "v3", Reason: "newer"}); !m.Changed || m.Forced {
		t.Errorf("newer date: %+v", m)
	}
	// Forced: moved and recorded as forced, with who and why.
	alice := models.Actor{Name: "alice@laptop"}
	m := d.mustMove(models.MoveRequest{To: "v2", Force: true, By: alice, Reason: "v3 is broken"})
	if !m.Changed || !m.Forced || d.production() != "v2" {
		t.Fatalf("forced move %+v, production %s", m, d.production())
	}
	h, err := d.reg.History(t.Context(), "ctr", "production")
	if err != nil {
		t.Fatal(err)
	}
	last := h[len(h)-1]
	if !last.Forced || last.Actor != alice || last.Reason != "v3 is broken" || last.From != "v3" || last.To != "v2" {
		t.Errorf("history records %+v", last)
	}
	for _, e := range h[:len(h)-1] {
		if e.Forced {
			t.Errorf("unforced move recorded as forced: %+v", e)
		}
	}
	// Force on a move the rule allows is no override: not recorded as forced.
	if m := d.mustMove(models.MoveRequest{To: "v1", Force: true, Reason: "forward anyway"}); m.Forced {
		t.Errorf("a forward move recorded as forced: %+v", m)
	}
}

// TestMoveDateRuleUndated: a version without a logical time, or an alias
// naming one, has nothing to order it by: moves go through as before.
func TestMoveDateRuleUndated(t *testing.T) {
	t.Parallel()
	d := newDated(t, nov14, "", nov09)
	d.mustMove(models.MoveRequest{To: "v1"})
	if m := d.mustMove(models.MoveRequest{To: "v2"}); !m.Changed || m.Forced {
		t.Fatalf("to undated: %+v", m)
	}
	if m := d.mustMove(models.MoveRequest{To: "v3"}); !m.Changed || m.Forced {
		t.Fatalf("from undated to an older date: %+v", m)
	}
	if m := d.mustMove(models.MoveRequest{Kind: models.KindRollback}); !m.Changed || m.To != "v2" {
		t.Fatalf("undo to undated: %+v", m)
	}
}

// TestMoveDateRuleRollback: the CLI's rollback (undo the latest move) and
// a rollback_model node to a given version follow the rule; a run
// undoing its own move back to exactly what it replaced is allowed.
func TestMoveDateRuleRollback(t *testing.T) {
	t.Parallel()
	d := newDated(t, nov09, nov14, nov15, "2026-11-01T00:00:00Z")
	d.mustMove(models.MoveRequest{To: "v1"})
	runA := models.Actor{Name: "retrain/ctr/deploy", Run: "run-a"}
	d.mustMove(models.MoveRequest{To: "v2", By: runA})

	// The CLI's rollback to an older date: refused, names both versions.
	oncall := models.Actor{Name: "oncall"}
	_, err := d.move(models.MoveRequest{Kind: models.KindRollback, By: oncall})
	d.wantSuperseded(err, "v2", "2026-11-14", "v1", "2026-11-09")
	// Another run's compensation may not move it back either.
	runB := models.Actor{Name: "retrain/ctr/undo", Run: "run-b"}
	_, err = d.move(models.MoveRequest{Kind: models.KindRollback, To: "v1", IfFrom: true, From: "v2", By: runB})
	d.wantSuperseded(err, "v2", "2026-11-14", "v1", "2026-11-09")
	// Run A's own compensation, to another version than its move
	// replaced: refused.
	_, err = d.move(models.MoveRequest{Kind: models.KindRollback, To: "v4", By: models.Actor{Name: "x", Run: "run-a"}, IfFrom: true, From: "v2"})
	d.wantSuperseded(err, "v2", "2026-11-14", "v4", "2026-11-01")
	// Run A's compensation undoing its own move: allowed, not forced.
	undo := models.Actor{Name: "retrain/ctr/undo_deploy", Run: "run-a"}
	m := d.mustMove(models.MoveRequest{Kind: models.KindRollback, To: "v1", IfFrom: true, From: "v2", By: undo})
	if !m.Changed || m.Forced || m.From != "v2" || m.To != "v1" || m.Kind != models.KindRollback {
		t.Fatalf("own undo: %+v", m)
	}
	// A promotion by run A is no undo: the exception is for rollbacks.
	d.mustMove(models.MoveRequest{To: "v3", By: runA})
	_, err = d.move(models.MoveRequest{To: "v1", By: runA})
	d.wantSuperseded(err, "v3", "2026-11-15", "v1", "2026-11-09")
	// Forced rollback by the CLI: moved and recorded.
	m = d.mustMove(models.MoveRequest{Kind: models.KindRollback, Force: true, By: oncall, Reason: "v3 misbehaves"})
	if !m.Forced || m.To != "v1" || m.From != "v3" {
		t.Fatalf("forced rollback: %+v", m)
	}
	// Rolling back to a newer date needs nothing.
	if m := d.mustMove(models.MoveRequest{Kind: models.KindRollback, By: oncall}); m.Forced || m.To != "v3" {
		t.Fatalf("rollback forward: %+v", m)
	}
}

// TestMoveCanaryAliasUnordered: a canary's own alias goes back to
// production's version whatever its date.
func TestMoveCanaryAliasUnordered(t *testing.T) {
	t.Parallel()
	d := newDated(t, nov09, nov14)
	d.mustMove(models.MoveRequest{Alias: "canary", To: "v2", Canary: true})
	m := d.mustMove(models.MoveRequest{Alias: "canary", Kind: models.KindRollback, To: "v1", IfFrom: true, From: "v2", Canary: true})
	if !m.Changed || m.Forced {
		t.Fatalf("canary alias back: %+v", m)
	}
}

// TestMoveConcurrentDates: deploys of several dates racing for production
// end at the latest date whatever order they finish in, and the history
// never goes back in date.
func TestMoveConcurrentDates(t *testing.T) {
	t.Parallel()
	times := []string{"2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z", "2026-11-04T00:00:00Z",
		"2026-11-05T00:00:00Z", "2026-11-06T00:00:00Z", "2026-11-07T00:00:00Z", "2026-11-08T00:00:00Z"}
	d := newDated(t, times...)
	var wg sync.WaitGroup
	errs := make([]error, len(times))
	for i := range times {
		wg.Go(func() {
			_, errs[i] = d.reg.Move(context.Background(), models.MoveRequest{Model: "ctr", Alias: "production",
				To: fmt.Sprintf("v%d", i+1), By: models.Actor{Name: "deploy", Run: fmt.Sprint("run-", i)}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, models.ErrSuperseded) {
			t.Errorf("deploy %d: %v", i, err)
		}
	}
	if got := d.production(); got != "v8" {
		t.Fatalf("production %s after the race, want v8 (the latest date)", got)
	}
	h, err := d.reg.History(t.Context(), "ctr", "production")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(h); i++ {
		// Versions are named in date order: vN is the N-th date.
		var a, b int
		fmt.Sscanf(h[i-1].To, "v%d", &a)
		fmt.Sscanf(h[i].To, "v%d", &b)
		if b < a {
			t.Errorf("history went back in date: %+v then %+v", h[i-1], h[i])
		}
	}
}

// TestMoveRequestChecked: a request naming no version, or an unknown
// kind, is refused before anything is read or written.
func TestMoveRequestChecked(t *testing.T) {
	t.Parallel()
	d := newDated(t, nov09)
	if _, err := d.move(models.MoveRequest{}); err == nil {
		t.Error("promotion without a version accepted")
	}
	if _, err := d.move(models.MoveRequest{To: "v1", Kind: "sideways"}); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, err := d.move(models.MoveRequest{To: "v9"}); !errors.Is(err, models.ErrNotFound) {
		t.Errorf("unknown version: %v", err)
	}
	if _, err := d.move(models.MoveRequest{Kind: models.KindRollback, To: "v1"}); !errors.Is(err, models.ErrNotFound) {
		t.Errorf("rollback of an unset alias: %v", err)
	}
}
