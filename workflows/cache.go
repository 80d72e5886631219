package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/nodecache"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// nodeCacheChange guards the node cache's lookups and stores around a
// node marked `cache:`.
const nodeCacheChange = "node-cache"

// Timeouts of the cache's activities. A lookup hashes the files a
// program node runs and asks the lake for snapshot ids; a store writes
// two small objects.
const (
	cacheLookupTimeout = 5 * time.Minute
	cacheStoreTimeout  = time.Minute
)

// skipCache says why a node is recomputed without a lookup: the run asked
// for no cache, or for this node to be refreshed; "" otherwise.
func (r *pipelineRun) skipCache(id string) string {
	switch {
	case r.noCache:
		return "recomputed: --no-cache"
	case slices.Contains(r.refresh, id):
		return "recomputed: --refresh " + id
	}
	return ""
}

// executeCached runs a node marked `cache:`: a lookup on the node's queue
// first; a hit's stored result is the node's, and a miss runs the node
// and, when it succeeds, stores its result under the key the lookup
// derived. The cache's own failures never fail the node: a lookup that
// fails is a miss, a store that fails is logged.
func (r *pipelineRun) executeCached(ctx workflow.Context, node dags.PlanNode, with nodeWith, prov *nodetype.Provenance) workflow.Future {
	fut, set := workflow.NewFuture(ctx)
	state := &r.result.Nodes[r.index[node.ID]]
	in := nodeInput(r.plan.Pipeline, r.result.ID, &r.values, node, node.ID, with)
	workflow.Go(ctx, func(ctx workflow.Context) {
		started := workflow.Now(ctx)
		look := nodetype.CacheLookup{Input: in, Version: node.Cache.Version, Files: node.Cache.Files,
			Labels: nodecache.Labels(node.With), Skip: r.skipCache(node.ID)}
		var lr nodetype.CacheLookupResult
		if err := workflow.ExecuteActivity(cacheOptions(ctx, node, "/cache-lookup", cacheLookupTimeout),
			nodetype.CacheLookupActivity, look).Get(ctx, &lr); err != nil {
			lr = nodetype.CacheLookupResult{Reason: "cache lookup failed: " + unwrapActivity(err).Error()}
		}
		if lr.Key != "" {
			r.keys[node.ID] = lr.Key // what provenance records of the nodes downstream
		}
		if lr.Hit {
			at := lr.Time
			state.Cache = &runs.NodeCache{Hit: true, Key: lr.Key, Run: lr.Run, Time: &at}
			set.Set(nodetype.Result{Outputs: lr.Outputs, Attempt: 0, StartedAt: started, EndedAt: workflow.Now(ctx)}, nil)
			return
		}
		state.Cache = &runs.NodeCache{Key: lr.Key, Reason: lr.Reason}
		var res nodetype.Result
		err := startNode(ctx, r.plan.Pipeline, r.result.ID, &r.values, node, node.ID, with, prov).Get(ctx, &res)
		if err == nil && lr.Components != nil && checkOutputs(node, res) == nil {
			// Stored before the node's dependents start, so a run that
			// ends right after still leaves its entries.
			st := nodetype.CacheStore{Pipeline: r.plan.Pipeline, Run: r.result.ID, Node: node.ID, Components: *lr.Components, Result: res}
			if serr := workflow.ExecuteActivity(cacheOptions(ctx, node, "/cache-store", cacheStoreTimeout),
				nodetype.CacheStoreActivity, st).Get(ctx, nil); serr != nil {
				workflow.GetLogger(ctx).Warn("cannot store the node's result in the cache", "node", node.ID, "error", serr)
			}
		}
		set.Set(res, err)
	})
	return fut
}

// cacheOptions are the options of a cache activity of node: on the
// node's queue, where the worker that would run the node reads what it
// would read.
func cacheOptions(ctx workflow.Context, node dags.PlanNode, suffix string, timeout time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          node.ID + suffix,
		TaskQueue:           node.Queue,
		StartToCloseTimeout: timeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, InitialInterval: time.Second},
		Summary:             node.ID + suffix,
	})
}
