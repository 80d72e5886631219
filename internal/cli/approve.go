package cli

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"

	gatenode "github.com/retrain-ml/retrain/activities/gate"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// NewApproveCommand returns `retrain approve`: force a failed gate that is
// waiting for a human to pass, recording who and why.
func NewApproveCommand(app *App) *cobra.Command {
	var (
		force        bool
		reason, node string
		by           string
	)
	cmd := &cobra.Command{
		Use:   "approve RUN --force --reason TEXT",
		Short: "Force a failed gate of a run to pass (it must be waiting: wait_for_approval), recording who and why",
		Long: `Overrides the verdict of a gate node that rejected a candidate and is
waiting for a human (its wait_for_approval has not run out). The gate then
passes, its outputs say forced, by whom and why, and the run goes on (to the
deploy). Who is --user, else $RETRAIN_USER, else the login name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return errors.New("approve overrides the gate's verdict: say so with --force")
			}
			if strings.TrimSpace(reason) == "" {
				return errors.New("--reason is required: the override is recorded with it")
			}
			if by == "" {
				by = currentUser()
			}
			if by == "" {
				return errors.New("cannot tell who approves: pass --user or set RETRAIN_USER")
			}
			ctx := cmd.Context()
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			id := args[0] + "/" + node
			handle, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID:   id,
				UpdateName:   gatenode.ApproveUpdate,
				Args:         []any{gatenode.Approval{By: by, Reason: reason}},
				WaitForStage: client.WorkflowUpdateStageCompleted,
			})
			if err == nil {
				var msg string
				if err = handle.Get(ctx, &msg); err == nil {
					fmt.Fprintln(app.Out, msg)
					return nil
				}
			}
			var notFound *serviceerror.NotFound
			if errors.As(err, &notFound) {
				return fmt.Errorf("no gate %q waiting in run %s (is the run id right, has the gate started, is it still waiting?): %w", node, args[0], err)
			}
			return fmt.Errorf("approve gate %s: %w", id, err)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "override the gate's verdict (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the gate's outputs (required)")
	cmd.Flags().StringVar(&node, "node", "gate", "id of the gate node")
	cmd.Flags().StringVar(&by, "user", "", "who approves (default $RETRAIN_USER, else the login name)")
	return cmd
}

func currentUser() string {
	if u := os.Getenv("RETRAIN_USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}
