package schedules

import (
	"context"
	"fmt"
	"slices"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

// WorkerWarnings says which scheduled pipelines no worker will run: when
// no worker polls the task queue, a warning per pipeline naming it and the
// queue (their runs wait until one does). Which pipelines a polling worker
// knows is not visible from the server (pollers report only an identity):
// ProbeWarnings asks them.
func WorkerWarnings(ctx context.Context, c client.Client, queue string, pipelines []string) ([]string, error) {
	if len(pipelines) == 0 {
		return nil, nil
	}
	resp, err := c.DescribeTaskQueue(ctx, queue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return nil, fmt.Errorf("describe task queue %s: %w", queue, err)
	}
	if len(resp.GetPollers()) > 0 {
		return nil, nil
	}
	pipelines = slices.Sorted(slices.Values(pipelines))
	var out []string
	for _, p := range slices.Compact(pipelines) {
		out = append(out, fmt.Sprintf("warning: no worker polls task queue %q, so none knows pipeline %s: its scheduled runs wait until a worker with %s in its --pipelines folder polls %q",
			queue, p, p, queue))
	}
	return out, nil
}
