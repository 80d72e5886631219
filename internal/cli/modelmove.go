package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/models"
)

// forceFlag is `model promote` and `model rollback`'s --force: an
// operator's override of the registry's date rule.
func forceFlag(c *cobra.Command, force *bool) {
	c.Flags().BoolVar(force, "force", false,
		"move even to a version trained for an older logical date than the one the alias names (needs --reason; recorded as forced)")
}

// moveAlias makes an operator's move of an alias through the registry's
// one rule. --force needs a reason, checked before anything is read; a
// move the date rule refuses says which versions and dates, and what
// --force would do.
func moveAlias(ctx context.Context, reg *models.Registry, req models.MoveRequest) (models.Move, error) {
	if req.Force && strings.TrimSpace(req.Reason) == "" {
		return models.Move{}, errors.New("--force needs --reason: a forced move is recorded in the alias history with who and why")
	}
	m, err := reg.Move(ctx, req)
	if errors.Is(err, models.ErrSuperseded) {
		return models.Move{}, fmt.Errorf("%w; --force --reason \"...\" moves it anyway and records the move as forced", err)
	}
	return m, err
}

// kindOf is a move's kind as the CLI shows it: "promote", "rollback",
// "rollback (forced)".
func kindOf(m models.Move) string {
	if m.Forced {
		return m.Kind + " (forced)"
	}
	return m.Kind
}
