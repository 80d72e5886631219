package cli

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/schedules"
)

// probeWait is how long `schedule apply` waits for a worker to answer the
// check of a pipeline.
const probeWait = 15 * time.Second

// warnNoWorkers prints a warning for each scheduled pipeline the queue's
// workers will not run: none polls it, or the one that answered a dry run
// does not know the pipeline or refuses its params (schedules.ProbeWarnings).
// Without probe (apply --dry-run, which changes nothing) it only looks for
// pollers.
func warnNoWorkers(ctx context.Context, app *App, c client.Client, namespace, queue string, specs []*dags.Spec, probe bool) {
	var probes []schedules.Probe
	for _, s := range specs {
		if len(s.Schedules) > 0 {
			sc := s.Schedules[0] // its params: a param the schedule supplies is supplied
			probes = append(probes, schedules.Probe{Pipeline: s.Name, Params: sc.Params, Schedule: sc.ID, Timezone: sc.Timezone})
		}
	}
	var (
		warnings []string
		err      error
	)
	if probe {
		warnings, err = schedules.ProbeWarnings(ctx, c, namespace, queue, probes, probeWait)
	} else {
		names := make([]string, 0, len(probes))
		for _, p := range probes {
			names = append(names, p.Pipeline)
		}
		warnings, err = schedules.WorkerWarnings(ctx, c, queue, names)
	}
	if err != nil {
		fmt.Fprintf(app.Err, "warning: cannot tell whether a worker polls task queue %q: %v\n", queue, err)
		return
	}
	for _, w := range warnings {
		fmt.Fprintln(app.Out, w)
	}
}
