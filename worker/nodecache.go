package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/retrain-ml/retrain/internal/nodecache"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// maxEntryBytes bounds a cache entry read back: outputs are small JSON
// values (a node's outputs are recorded in history, capped at 2 MB).
const maxEntryBytes = 4 << 20

// nodeCache serves the node cache's activities: lookups and stores of the
// results of nodes marked `cache:`, in the object store. Only workers
// write entries.
type nodeCache struct {
	store  *s3store.Store // nil: no object store, every lookup misses
	types  map[string]nodetype.Type
	worker string // this worker's identity, recorded with each entry
	logger *slog.Logger
}

func newNodeCache(store *s3store.Store, types []nodetype.Type, worker string, logger *slog.Logger) *nodeCache {
	c := &nodeCache{store: store, types: map[string]nodetype.Type{}, worker: worker, logger: logger}
	for _, t := range types {
		c.types[t.NodeType.Name] = t
	}
	return c
}

// objects adapts the object store to nodecache.Store.
type objects struct{ s *s3store.Store }

func (o objects) Get(ctx context.Context, path string) ([]byte, error) {
	r, _, err := o.s.Get(ctx, path)
	if errors.Is(err, s3store.ErrNotFound) {
		return nil, fmt.Errorf("%s: %w", path, nodecache.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxEntryBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxEntryBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxEntryBytes)
	}
	return b, nil
}

func (o objects) Put(ctx context.Context, path string, data []byte) error {
	_, err := o.s.PutBytes(ctx, path, data)
	return err
}

// Lookup derives a node's key on this worker (its type's version, the
// resolved `with`, the identities of what it reads) and looks the key
// up. What goes wrong is a miss with its reason, never an error: the
// node then runs as if nothing were cached.
func (c *nodeCache) Lookup(ctx context.Context, in nodetype.CacheLookup) (nodetype.CacheLookupResult, error) {
	typ := in.Input.Type
	res, result := c.lookup(ctx, in)
	activity.GetMetricsHandler(ctx).WithTags(map[string]string{"node_type": typ, "result": result}).Counter(MetricCacheLookups).Inc(1)
	return res, nil
}

func (c *nodeCache) lookup(ctx context.Context, in nodetype.CacheLookup) (nodetype.CacheLookupResult, string) {
	t, ok := c.types[in.Input.Type]
	if !ok || t.Cache == nil {
		return nodetype.CacheLookupResult{Reason: fmt.Sprintf("type %s cannot be cached on worker %s", in.Input.Type, c.worker)}, "miss"
	}
	if c.store == nil {
		return nodetype.CacheLookupResult{Reason: "the worker has no object store for the cache"}, "miss"
	}
	ids := nodetype.Identities{}
	if t.Cache.Inputs != nil {
		got, err := t.Cache.Inputs(ctx, in.Input, in.Files)
		if err != nil {
			return nodetype.CacheLookupResult{Reason: "cannot derive the key: " + nodetype.MessageOf(err)}, "miss"
		}
		ids = got
	}
	comps := nodecache.Components{
		Type: in.Input.Type, TypeVersion: t.Cache.Version, CacheVersion: in.Version,
		With: nodecache.Flatten(in.Input.With), Inputs: ids, Labels: in.Labels,
	}
	if in.Skip != "" {
		return nodetype.CacheLookupResult{Key: comps.Key(), Reason: in.Skip, Components: &comps}, "skipped"
	}
	var verify nodecache.Verify
	if t.Cache.Verify != nil {
		verify = func(ctx context.Context, outputs map[string]any) (string, error) {
			return t.Cache.Verify(ctx, in.Input, outputs)
		}
	}
	started := time.Now()
	r := nodecache.Lookup(ctx, objects{c.store}, in.Input.Pipeline, in.Input.Node, comps, verify)
	c.logger.Debug("node cache lookup", "node", in.Input.Node, "type", in.Input.Type, "hit", r.Hit, "reason", r.Reason, "took", time.Since(started))
	out := nodetype.CacheLookupResult{Hit: r.Hit, Key: r.Key, Reason: r.Reason, Components: &comps}
	if !r.Hit {
		return out, "miss"
	}
	e := r.Entry
	out.Run, out.Attempt, out.Time, out.Outputs = e.Run, e.Attempt, e.Time, e.Outputs
	return out, "hit"
}

// Store records a succeeded node's result under its key.
func (c *nodeCache) Store(ctx context.Context, in nodetype.CacheStore) error {
	if c.store == nil {
		return nil
	}
	e := nodecache.Entry{
		Components: in.Components, Outputs: in.Result.Outputs,
		Run: in.Run, Node: in.Node, Attempt: in.Result.Attempt, Worker: c.worker, Time: time.Now().UTC(),
		StartedAt: in.Result.StartedAt, EndedAt: in.Result.EndedAt,
	}
	return nodecache.Save(ctx, objects{c.store}, in.Pipeline, e)
}

// registerCache registers the cache's activities on w: every queue that
// runs nodes looks up and stores their results.
func registerCache(w interface {
	RegisterActivityWithOptions(any, activity.RegisterOptions)
}, c *nodeCache) {
	w.RegisterActivityWithOptions(c.Lookup, activity.RegisterOptions{Name: nodetype.CacheLookupActivity})
	w.RegisterActivityWithOptions(c.Store, activity.RegisterOptions{Name: nodetype.CacheStoreActivity})
}
