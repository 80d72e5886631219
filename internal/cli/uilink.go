package cli

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/runs"
)

// useNamespaceUI points the Web UI links at the UI the namespace publishes
// (`retrain dev` publishes the port it actually serves on, or that it
// serves none) unless the user chose one with --ui-address or
// RETRAIN_UI_ADDRESS. A namespace that publishes nothing, or cannot be
// described, leaves the default. UIAddress ends up "" when there is no UI.
func (a *App) useNamespaceUI(ctx context.Context, cmd *cobra.Command, c client.Client) {
	if f := cmd.Flag("ui-address"); (f != nil && f.Changed) || os.Getenv("RETRAIN_UI_ADDRESS") != "" {
		return
	}
	addr, ok, err := runs.UIAddress(ctx, c, a.Conn.Namespace)
	if err != nil {
		a.Logger().Debug("no Web UI address from the namespace", "error", err)
		return
	}
	if ok {
		a.UIAddress = addr
	}
}
