package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	gatenode "github.com/retrain-ml/retrain/activities/gate"
	"github.com/retrain-ml/retrain/internal/approval"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// NewApproveCommand returns `retrain approve`: force a failed gate that is
// waiting for a human to pass, or promote a baking canary now, recording
// who and why.
func NewApproveCommand(app *App) *cobra.Command {
	var (
		force                 bool
		reason, node, keyFile string
		by                    string
	)
	cmd := &cobra.Command{
		Use:   "approve RUN --reason TEXT [--node ID] [--force]",
		Short: "Promote a run's baking canary now, or force its failed gate to pass (--force), recording who and why",
		Long: `For a canary node that is baking: skips the rest of its bake and
promotes the candidate to production now (by compare-and-swap, as when
its checks pass). Its outputs say approved, by whom and why.

For a gate node that rejected a candidate and is waiting for a human (its
wait_for_approval has not run out): overrides the verdict, with --force.
The gate then passes, its outputs say forced, by whom and why, and the run
goes on (to the deploy).

Without --node, the run's one waiting gate or baking canary is meant.
Who is --user, else $RETRAIN_USER, else the login name.` + signingHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decideNode(cmd.Context(), app, decider{run: args[0], node: node, by: by, reason: reason, keyFile: keyFile}, func(typ string) (string, error) {
				if typ == canarynode.Workflow {
					return canarynode.ApproveName, nil
				}
				if !force {
					return "", errors.New("approve overrides the gate's verdict: say so with --force")
				}
				return gatenode.ApproveUpdate, nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "override a gate's verdict (required for a gate)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the node's outputs (required)")
	cmd.Flags().StringVar(&node, "node", "", "id of the gate or canary node (default: the run's one waiting gate or canary)")
	cmd.Flags().StringVar(&by, "user", "", "who approves (default $RETRAIN_USER, else the login name)")
	keyFlag(cmd, &keyFile)
	return cmd
}

// NewRejectCommand returns `retrain reject`: roll a baking canary back now.
func NewRejectCommand(app *App) *cobra.Command {
	var reason, node, by, keyFile string
	cmd := &cobra.Command{
		Use:   "reject RUN --reason TEXT [--node ID]",
		Short: "Roll a run's baking canary back now, recording who and why",
		Long: `Stops a canary node's bake: the canary alias moves back to production's
version, the webhooks are told 0%, and the node fails (CanaryRolledBack),
so the run's on_failure compensations run. Production is untouched.
Who is --user, else $RETRAIN_USER, else the login name.` + signingHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return decideNode(cmd.Context(), app, decider{run: args[0], node: node, by: by, reason: reason, keyFile: keyFile}, func(typ string) (string, error) {
				if typ != canarynode.Workflow {
					return "", fmt.Errorf("node is a %s, not a canary: only a canary can be rejected", typ)
				}
				return canarynode.RejectName, nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the node's outputs and the alias history (required)")
	cmd.Flags().StringVar(&node, "node", "", "id of the canary node (default: the run's one baking canary)")
	cmd.Flags().StringVar(&by, "user", "", "who rejects (default $RETRAIN_USER, else the login name)")
	keyFlag(cmd, &keyFile)
	return cmd
}

// signingHelp is the approve and reject commands' word on signing.
const signingHelp = `

A worker whose operator lists approvers (a folder approvers/ in its
secrets folder, one key file per approver named after them) takes only
decisions signed with the approver's key: --key-file, else
$` + EnvApproverKeyFile + `, else the key itself in $` + EnvApproverKey + `.
Without a list, the decision is taken and recorded as claimed
("claimed by NAME"): the worker cannot tell who sent it.`

// Where retrain approve and reject find the approver's key.
const (
	EnvApproverKeyFile = "RETRAIN_APPROVER_KEY_FILE"
	EnvApproverKey     = "RETRAIN_APPROVER_KEY"
)

func keyFlag(cmd *cobra.Command, keyFile *string) {
	cmd.Flags().StringVar(keyFile, "key-file", "", "file holding your approver key, to sign the decision (default $"+EnvApproverKeyFile+", else the key in $"+EnvApproverKey+")")
}

// decider is a human's decision as the command line gave it.
type decider struct {
	run, node, by, reason, keyFile string
}

// approverKey reads the caller's key: nil when none is set (the decision
// goes unsigned).
func approverKey(keyFile string) ([]byte, error) {
	if keyFile == "" {
		keyFile = os.Getenv(EnvApproverKeyFile)
	}
	if keyFile == "" {
		if k := strings.TrimSpace(os.Getenv(EnvApproverKey)); k != "" {
			return []byte(k), nil
		}
		return nil, nil
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("approver key: %w", err)
	}
	k := strings.TrimSpace(string(b))
	if len(k) < approval.MinKeyLen {
		return nil, fmt.Errorf("approver key in %s: shorter than %d bytes (make one with: openssl rand -hex 32)", keyFile, approval.MinKeyLen)
	}
	return []byte(k), nil
}

// decideNode sends a human's decision to d's node of d's run (found when
// d.node is ""), signed when the caller has a key: update picks the
// update by the node's workflow type.
func decideNode(ctx context.Context, app *App, d decider, update func(typ string) (string, error)) error {
	if strings.TrimSpace(d.reason) == "" {
		return errors.New("--reason is required: the decision is recorded with it")
	}
	by := d.by
	if by == "" {
		by = currentUser()
	}
	if by == "" {
		return errors.New("cannot tell who decides: pass --user or set RETRAIN_USER")
	}
	key, err := approverKey(d.keyFile)
	if err != nil {
		return err
	}
	c, err := app.Conn.Dial(ctx, app.Logger())
	if err != nil {
		return err
	}
	defer c.Close()
	id, runID, typ, err := waitingNode(ctx, c, d.run, d.node)
	if err != nil {
		return err
	}
	name, err := update(typ)
	if err != nil {
		return err
	}
	a := gatenode.Approval{By: by, Reason: d.reason}
	if key != nil {
		// Signed over what the worker checks: this execution of this
		// node, this decision, who, why and when.
		r := approval.Stamp(key, approval.Request{Workflow: id, Execution: runID, Decision: name, By: by, Reason: d.reason}, time.Now())
		a.At, a.Signature = r.At, r.Signature
	}
	handle, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		RunID:        runID,
		UpdateName:   name,
		Args:         []any{a},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		var msg string
		if err = handle.Get(ctx, &msg); err == nil {
			fmt.Fprintln(app.Out, msg)
			return nil
		}
	}
	return fmt.Errorf("%s %s: %w", name, id, err)
}

// waitingNode finds the child workflow of run that a decision is for:
// node's, or the run's one running gate or canary. It returns its id and
// workflow type: its workflow id, its run id and its type.
func waitingNode(ctx context.Context, c client.Client, run, node string) (string, string, string, error) {
	if node != "" {
		id := run + "/" + node
		d, err := c.DescribeWorkflowExecution(ctx, id, "")
		if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
			return "", "", "", fmt.Errorf("no gate or canary %q in run %s (is the run id right, has the node started?): %w", node, run, err)
		}
		if err != nil {
			return "", "", "", fmt.Errorf("describe %s: %w", id, err)
		}
		info := d.GetWorkflowExecutionInfo()
		return id, info.GetExecution().GetRunId(), info.GetType().GetName(), nil
	}
	d, err := c.DescribeWorkflowExecution(ctx, run, "")
	if err != nil {
		return "", "", "", fmt.Errorf("run %s: %w", run, err)
	}
	var found []string
	var typ, runID string
	for _, pc := range d.GetPendingChildren() {
		if t := pc.GetWorkflowTypeName(); t == canarynode.Workflow || t == gatenode.GateWorkflow {
			found, typ, runID = append(found, pc.GetWorkflowId()), t, pc.GetRunId()
		}
	}
	switch len(found) {
	case 1:
		return found[0], runID, typ, nil
	case 0:
		return "", "", "", fmt.Errorf("run %s has no gate or canary running now: approve --force overrides a gate that failed and waits (wait_for_approval); approve and reject decide a canary while it bakes", run)
	}
	return "", "", "", fmt.Errorf("run %s has %d gates or canaries running (%s): say which with --node", run, len(found), strings.Join(found, ", "))
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
