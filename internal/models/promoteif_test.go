package models_test

import (
	"errors"
	"testing"

	"github.com/retrain-ml/retrain/internal/models"
)

// TestPromoteIf moves an alias only while it names the version the move
// was decided against: a canary's promotion never overwrites a deploy
// that happened during its bake.
func TestPromoteIf(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx := t.Context()
	register(t, reg, "ctr", 3)
	if _, err := reg.PromoteIf(ctx, "ctr", "production", "", "v1", bot, "first"); err != nil {
		t.Fatal(err)
	}
	m, err := reg.PromoteIf(ctx, "ctr", "production", "v1", "v2", bot, "canary passed")
	if err != nil || !m.Changed || m.From != "v1" || m.To != "v2" || m.Kind != "promote" {
		t.Fatalf("PromoteIf v1 -> v2 = %+v, %v", m, err)
	}
	// A retry of the same promotion changes nothing and succeeds.
	if m, err := reg.PromoteIf(ctx, "ctr", "production", "v1", "v2", bot, "again"); err != nil || m.Changed {
		t.Fatalf("retried PromoteIf = %+v, %v", m, err)
	}
	// Decided against v1, but production names v2 now: refused.
	_, err = reg.PromoteIf(ctx, "ctr", "production", "v1", "v3", bot, "stale")
	if !errors.Is(err, models.ErrConcurrentMove) {
		t.Fatalf("stale PromoteIf: %v, want ErrConcurrentMove", err)
	}
	if h, _ := reg.History(ctx, "ctr", "production"); len(h) != 2 {
		t.Fatalf("history has %d moves, want 2", len(h))
	}
}
