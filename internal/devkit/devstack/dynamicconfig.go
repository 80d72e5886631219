package devstack

import (
	"time"

	"go.temporal.io/server/common/dynamicconfig"
)

// Speed tuning for a single-host, single-user stack with one history shard.
//
// The server's defaults are sized for multi-host clusters with thousands of
// shards, where per-shard rate limits protect the database. With a single
// shard they become the bottleneck: each history queue reader may poll its
// task table at most MaxPollRPS times per second, so the stock 20 RPS puts a
// floor of ~50 ms under every hop that goes through the transfer queue (e.g.
// activity completed -> next workflow task dispatched to matching).
const (
	// queuePollRPS is the per-shard poll budget of each history queue reader.
	// Readers poll when notified of new tasks, not continuously, so a high
	// budget costs nothing when idle.
	queuePollRPS = 10000
	// serviceRPS lifts the front-door and inter-service rate limits well
	// above what one developer machine can generate, so a large fan-out is
	// never throttled by the server itself.
	serviceRPS = 100000
	// namespaceRefreshInterval bounds how long a namespace change (a search
	// attribute added, a namespace created with the CLI) takes to reach
	// every service. Each refresh is one read of the small namespaces table.
	namespaceRefreshInterval = time.Second
)

// StandaloneActivitiesKey is the server's dynamic config key that lets
// clients start activities outside workflows; the stack turns it off
// (docs/security.md says to do the same on a production namespace).
const StandaloneActivitiesKey = "activity.enableStandalone"

// tunedDynamicConfig returns the dynamic config the stack runs with: the
// speed settings below, then overrides (keys as in the server's dynamic
// config YAML, e.g. "history.transferProcessorMaxPollRPS") on top.
func tunedDynamicConfig(overrides map[string]any) *dynamicconfig.MemoryClient {
	c := dynamicconfig.NewMemoryClient()
	for _, kv := range tunedSettings() {
		c.OverrideSetting(kv.setting, kv.value)
	}
	// Standalone activities (started by a client, outside any workflow)
	// are on by default in server 1.32. retrain's activities only ever run
	// for a Pipeline run, and a client that may start executions must not
	// reach a node's activity without one: the worker refuses such starts
	// too (worker/guard.go), and the server never offers them.
	c.OverrideValue(dynamicconfig.MakeKey(StandaloneActivitiesKey), false)
	for k, v := range overrides {
		c.OverrideValue(dynamicconfig.MakeKey(k), v)
	}
	return c
}

type settingValue struct {
	setting dynamicconfig.GenericSetting
	value   any
}

// tunedSettings lists every setting the stack changes from the server
// defaults. Plain values on namespace or task-queue scoped settings apply to
// all namespaces and task queues.
func tunedSettings() []settingValue {
	return []settingValue{
		// History queue readers: the ~50 ms/step floor (see above). Timer
		// covers activity/workflow timeouts and retries with backoff,
		// visibility keeps the UI's workflow list current, outbound covers
		// Nexus/callbacks.
		{dynamicconfig.TransferProcessorMaxPollRPS, queuePollRPS},
		{dynamicconfig.TimerProcessorMaxPollRPS, queuePollRPS},
		{dynamicconfig.VisibilityProcessorMaxPollRPS, queuePollRPS},
		{dynamicconfig.OutboundProcessorMaxPollRPS, queuePollRPS},

		// Service rate limits: a fan-out of a few thousand activities issues
		// that many AddActivityTask/Respond calls within a second.
		{dynamicconfig.FrontendRPS, serviceRPS},
		{dynamicconfig.FrontendMaxNamespaceRPSPerInstance, serviceRPS},
		{dynamicconfig.MatchingRPS, serviceRPS},
		{dynamicconfig.HistoryRPS, serviceRPS},
		// The Web UI lists and counts workflows on every page load and
		// refresh; 10 RPS (default) makes it stutter while a pipeline runs.
		{dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance, 1000},

		// One partition per task queue: with one matching host, extra
		// partitions only add forwarding hops between partitions before a
		// task meets a poller.
		{dynamicconfig.MatchingNumTaskqueueReadPartitions, 1},
		{dynamicconfig.MatchingNumTaskqueueWritePartitions, 1},

		// Hand the first workflow task back in the StartWorkflowExecution
		// response, and activities back in the RespondWorkflowTaskCompleted
		// response, skipping matching when the worker has free slots.
		{dynamicconfig.EnableEagerWorkflowStart, true},
		{dynamicconfig.EnableActivityEagerExecution, true},

		// Search attributes registered at startup (or by `temporal operator
		// search-attribute create` while the stack runs) are usable
		// immediately, instead of after the cache's refresh interval.
		{dynamicconfig.ForceSearchAttributesCacheRefreshOnRead, true},
		{dynamicconfig.NamespaceCacheRefreshInterval, namespaceRefreshInterval},
	}
}
