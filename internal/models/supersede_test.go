package models_test

import (
	"context"
	"errors"
	"testing"

	"github.com/retrain-ml/retrain/internal/models"
)

func TestPromoteUnlessNewer(t *testing.T) {
	ctx := context.Background()
	reg, _ := newRegistry(t)
	bot := models.Actor{Name: "retrain/ctr/deploy", Run: "r"}
	register := func(weights, logical string) models.Version {
		t.Helper()
		v, err := reg.Register(ctx, "ctr", artifacts(t, map[string]string{"w.bin": weights}), "", models.Meta{LogicalTime: logical})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	alias := func() string {
		t.Helper()
		v, err := reg.Resolve(ctx, "ctr@production")
		if err != nil {
			t.Fatal(err)
		}
		return v.Version
	}
	nov14 := register("14", "2026-11-14T00:00:00Z")
	nov09 := register("09", "2026-11-09T00:00:00Z")
	nov15 := register("15", "2026-11-15T00:00:00+01:00")
	undated := register("undated", "")

	if _, err := reg.PromoteUnlessNewer(ctx, "ctr", "production", nov14.Version, bot, "first"); err != nil {
		t.Fatalf("first deploy: %v", err)
	}
	_, err := reg.PromoteUnlessNewer(ctx, "ctr", "production", nov09.Version, bot, "older date")
	var sup *models.Superseded
	if !errors.As(err, &sup) || !errors.Is(err, models.ErrSuperseded) || sup.By.Version != nov14.Version {
		t.Fatalf("older date: err %v, want superseded by %s", err, nov14.Version)
	}
	if got := alias(); got != nov14.Version {
		t.Fatalf("alias moved to %s by an older date", got)
	}
	if sup.By.LogicalDate() != "2026-11-14" {
		t.Errorf("superseding version's date %q", sup.By.LogicalDate())
	}
	// The same version again is no move and no error.
	if m, err := reg.PromoteUnlessNewer(ctx, "ctr", "production", nov14.Version, bot, "again"); err != nil || m.Changed {
		t.Fatalf("same version: %+v, %v", m, err)
	}
	if _, err := reg.PromoteUnlessNewer(ctx, "ctr", "production", nov15.Version, bot, "newer"); err != nil || alias() != nov15.Version {
		t.Fatalf("newer date: %v, alias %s", err, alias())
	}
	// Nothing to order by: promoted as Promote would.
	if _, err := reg.PromoteUnlessNewer(ctx, "ctr", "production", undated.Version, bot, "undated"); err != nil || alias() != undated.Version {
		t.Fatalf("undated: %v, alias %s", err, alias())
	}
	// Forcing an older date is Promote.
	if _, err := reg.Promote(ctx, "ctr", "production", nov09.Version, bot, "forced"); err != nil || alias() != nov09.Version {
		t.Fatalf("forced: %v, alias %s", err, alias())
	}
}
