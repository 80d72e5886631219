package models_test

import (
	"errors"
	"testing"

	"github.com/retrain-ml/retrain/internal/models"
)

// TestMoveIfFrom moves an alias only while it names the version the move
// was decided against: a canary's promotion never overwrites a deploy
// that happened during its bake.
func TestMoveIfFrom(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx := t.Context()
	register(t, reg, "ctr", 3)
	if _, err := reg.Move(ctx, models.MoveRequest{Model: "ctr", Alias: "production", IfFrom: true, From: "", To: "v1", By: bot, Reason: "first"}); err != nil {
		t.Fatal(err)
	}
	m, err := reg.Move(ctx, models.MoveRequest{Model: "ctr", Alias: "production", IfFrom: true, From: "v1", To: "v2", By: bot, Reason: "canary passed"})
	if err != nil || !m.Changed || m.From != "v1" || m.To != "v2" || m.Kind != "promote" {
		t.Fatalf("IfFrom v1 -> v2 = %+v, %v", m, err)
	}
	// A retry of the same promotion changes nothing and succeeds.
	if m, err := reg.Move(ctx, models.MoveRequest{Model: "ctr", Alias: "production", IfFrom: true, From: "v1", To: "v2", By: bot, Reason: "again"}); err != nil || m.Changed {
		t.Fatalf("retried move = %+v, %v", m, err)
	}
	// Decided against v1, but production names v2 now: refused.
	_, err = reg.Move(ctx, models.MoveRequest{Model: "ctr", Alias: "production", IfFrom: true, From: "v1", To: "v3", By: bot, Reason: "stale"})
	if !errors.Is(err, models.ErrConcurrentMove) {
		t.Fatalf("stale move: %v, want ErrConcurrentMove", err)
	}
	if h, _ := reg.History(ctx, "ctr", "production"); len(h) != 2 {
		t.Fatalf("history has %d moves, want 2", len(h))
	}
}
