package worker

import (
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/retrain-ml/retrain/nodetype"
)

// Bounded activities: the fan-out groups of a node type (promote_features'
// bucket groups, split's) run from a task queue of their own per activity
// type, nodetype.BoundedQueue(queue, type), which this worker polls with
// a worker of their own whose slots are the type's limit. Temporal hands a
// worker a task only when it has a free slot, so a group never waits
// inside a worker for room to run: it waits on the server, where any
// worker of the queue with a free slot takes it. (A bound taken inside
// the activity, as promotion had, held the activity's slot while it
// waited, and another worker with room could not have the group.)

// boundedActivity is one bounded activity type this worker serves.
type boundedActivity struct {
	name  string // the activity type
	node  string // the node type that schedules it
	fn    any
	limit int
}

// boundedActivities lists the bounded activities of types with their
// limits: limits[activity type] or limits[node type] when set (the node
// type's name sets all of its bounded activities), GOMAXPROCS otherwise: a
// group is CPU-bound, and more groups at once than cores only adds memory
// (16 promotion groups at once on 2 cores took retrain dev to 6.9 GB RSS
// for no gain in throughput). A key that names no bounded activity of
// types is an error: a misspelled limit would otherwise be ignored.
func boundedActivities(types []nodetype.Type, limits map[string]int) ([]boundedActivity, error) {
	var out []boundedActivity
	known := map[string]bool{}
	for _, t := range types {
		for _, name := range t.Bounded {
			b := boundedActivity{name: name, node: t.NodeType.Name, fn: t.Activities[name], limit: runtime.GOMAXPROCS(0)}
			if n, ok := limits[b.node]; ok {
				b.limit = n
			}
			if n, ok := limits[name]; ok {
				b.limit = n
			}
			known[name], known[b.node] = true, true
			out = append(out, b)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(limits)) {
		switch {
		case !known[k]:
			return nil, fmt.Errorf("--activity-concurrency %s=%d: no bounded activity or node type %q on this worker (known: %s)",
				k, limits[k], k, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		case limits[k] < 1:
			return nil, fmt.Errorf("--activity-concurrency %s=%d: want at least 1", k, limits[k])
		}
	}
	slices.SortFunc(out, func(a, b boundedActivity) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// boundedWorkers returns one worker per bounded activity, polling its
// queue below queue with the same interceptors as the main worker (the
// guard first: a group runs only for a Pipeline run this worker trusts,
// as any node does).
func boundedWorkers(c client.Client, queue, identity string, bounded []boundedActivity, interceptors []interceptor.WorkerInterceptor, logger *slog.Logger) []sdkworker.Worker {
	var out []sdkworker.Worker
	for _, b := range bounded {
		q := nodetype.BoundedQueue(queue, b.name)
		w := sdkworker.New(c, q, sdkworker.Options{
			Identity: identity, // the process's, as on its other queues
			// The SDK takes a slot before it polls, so this worker never
			// holds a task it has no room to run.
			MaxConcurrentActivityExecutionSize: b.limit,
			MaxHeartbeatThrottleInterval:       heartbeatThrottle,
			Interceptors:                       interceptors,
			// Activities only: no workflow task is ever sent here.
			DisableWorkflowWorker: true,
		})
		w.RegisterActivityWithOptions(b.fn, activity.RegisterOptions{Name: b.name})
		out = append(out, w)
		logger.Info("polling a bounded activity's queue", "queue", q, "node_type", b.node, "slots", b.limit)
	}
	return out
}
