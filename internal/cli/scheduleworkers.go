package cli

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/schedules"
)

// warnNoWorkers prints a warning for each scheduled pipeline whose task
// queue no worker polls (schedules.WorkerWarnings says what it can and
// cannot see).
func warnNoWorkers(ctx context.Context, app *App, c client.Client, queue string, specs []*dags.Spec) {
	var names []string
	for _, s := range specs {
		if len(s.Schedules) > 0 {
			names = append(names, s.Name)
		}
	}
	warnings, err := schedules.WorkerWarnings(ctx, c, queue, names)
	if err != nil {
		fmt.Fprintf(app.Err, "warning: cannot tell whether a worker polls task queue %q: %v\n", queue, err)
		return
	}
	for _, w := range warnings {
		fmt.Fprintln(app.Out, w)
	}
}
