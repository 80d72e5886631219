package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// NewWorkersCommand returns `retrain workers`: the live workers of a task
// queue, each with the digest of its policy, and the fields in which any
// differs from the others (docs/scaling.md, "One policy per queue").
func NewWorkersCommand(app *App) *cobra.Command {
	var (
		queue  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List a task queue's workers with their policy digests, and which policy fields differ between them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := app.Conn.Dial(ctx, app.Logger())
			if err != nil {
				return err
			}
			defer c.Close()
			list, err := worker.QueuePolicies(ctx, c, app.Conn.Namespace, queue)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []worker.PublishedPolicy{}
				}
				enc := json.NewEncoder(app.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			if len(list) == 0 {
				fmt.Fprintf(app.Out, "no worker of this release polls task queue %q\n", queue)
				return nil
			}
			tw := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKER\tPOLICY\tLAST POLLED\tDIFFERS")
			differ := 0
			for _, p := range list {
				if len(p.Differs) > 0 {
					differ++
				}
				fmt.Fprintf(tw, "%s\t%s\t%s ago\t%s\n", p.Worker, p.Digest, time.Since(p.Polled).Round(time.Second), strings.Join(p.Differs, ", "))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if differ > 0 {
				fmt.Fprintf(app.Err, "warning: %d of %d workers on task queue %q run under another policy than the others: a run's outcome depends on which takes it; see docs/scaling.md, \"One policy per queue\"\n",
					differ, len(list), queue)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "task-queue", runs.DefaultTaskQueue, "task queue the workers poll")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}
