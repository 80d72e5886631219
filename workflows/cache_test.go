package workflows

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/nodecache"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// memCache is the node cache's activities over memory: the key is the
// node's type and resolved `with` (a step reads nothing else), looked up
// and stored as the worker does (nodecache.Lookup and Save).
type memCache struct {
	mu      sync.Mutex
	objs    map[string][]byte
	lookups []string // node ids looked up
	stores  []string // node ids stored
}

func (m *memCache) Get(_ context.Context, p string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objs[p]
	if !ok {
		return nil, fmt.Errorf("%s: %w", p, nodecache.ErrNotFound)
	}
	return b, nil
}

func (m *memCache) Put(_ context.Context, p string, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[p] = b
	return nil
}

func (m *memCache) lookup(ctx context.Context, in nodetype.CacheLookup) (nodetype.CacheLookupResult, error) {
	m.mu.Lock()
	m.lookups = append(m.lookups, in.Input.Node)
	m.mu.Unlock()
	c := nodecache.Components{Type: in.Input.Type, TypeVersion: 1, CacheVersion: in.Version,
		With: nodecache.Flatten(in.Input.With), Inputs: map[string]string{}, Labels: in.Labels}
	if in.Skip != "" {
		return nodetype.CacheLookupResult{Key: c.Key(), Reason: in.Skip, Components: &c}, nil
	}
	r := nodecache.Lookup(ctx, m, in.Input.Pipeline, in.Input.Node, c, nil)
	out := nodetype.CacheLookupResult{Hit: r.Hit, Key: r.Key, Reason: r.Reason, Components: &c}
	if r.Hit {
		out.Run, out.Attempt, out.Time, out.Outputs = r.Entry.Run, r.Entry.Attempt, r.Entry.Time, r.Entry.Outputs
	}
	return out, nil
}

func (m *memCache) store(ctx context.Context, in nodetype.CacheStore) error {
	m.mu.Lock()
	m.stores = append(m.stores, in.Node)
	m.mu.Unlock()
	return nodecache.Save(ctx, m, in.Pipeline, nodecache.Entry{Components: in.Components, Outputs: in.Result.Outputs,
		Run: in.Run, Node: in.Node, Attempt: in.Result.Attempt, Worker: "test", Time: in.Result.EndedAt})
}

// runCached runs spec as run id with the cache's activities registered;
// step is cacheable.
func (h *harness) runCached(m *memCache, id, spec string, in runs.PipelineInput) (*runs.Result, error) {
	h.mu.Lock()
	h.order = nil
	h.mu.Unlock()
	m.lookups, m.stores = nil, nil
	env := h.NewTestWorkflowEnvironment()
	step := stepType
	step.Cacheable = true
	reg, err := dags.NewRegistry(step, dags.NodeType{Name: "ship", OpenWith: true})
	if err != nil {
		h.t.Fatal(err)
	}
	Register(env)
	env.RegisterActivityWithOptions((&Resolver{AllowInlineSpecs: true, Registry: reg}).Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	env.RegisterActivityWithOptions(nodetype.Activity(h.step), activity.RegisterOptions{Name: "step"})
	env.RegisterActivityWithOptions(nodetype.Activity(h.step), activity.RegisterOptions{Name: "ship"})
	env.RegisterActivityWithOptions(m.lookup, activity.RegisterOptions{Name: nodetype.CacheLookupActivity})
	env.RegisterActivityWithOptions(m.store, activity.RegisterOptions{Name: nodetype.CacheStoreActivity})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	b, _ := json.Marshal(spec)
	in.Spec, in.SpecFile = b, "test.yaml"
	env.ExecuteWorkflow(runs.PipelineWorkflow, in)
	if !env.IsWorkflowCompleted() {
		h.t.Fatal("workflow did not complete")
	}
	var res runs.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		return nil, err
	}
	return &res, nil
}

const cachedSpec = `
name: cached
params:
  rows: {type: int, default: 10}
  epochs: {type: int, default: 2}
  broken: {type: bool, default: false}
defaults: {cache: true, retry: {max_attempts: 1}}
nodes:
  - {id: prep, type: step, with: {rows: "${params.rows}"}}
  - {id: train, type: step, needs: [prep], with: {data: "${nodes.prep.outputs.rows}", epochs: "${params.epochs}", permanent: "${params.broken}"}}
  - {id: ship, type: ship, needs: [train], with: {model: "${nodes.train.outputs.epochs}"}}
`

// TestPipelineCache: a first run misses everything ("no entry") and
// stores each cached node; the same run again is served from the cache
// (no step runs but the uncached ship) and names the run that computed
// it; a param only train reads misses train alone, with the param's
// change as its reason; a failed node is never stored; --no-cache and
// --refresh recompute.
func TestPipelineCache(t *testing.T) {
	h := newHarness(t)
	m := &memCache{objs: map[string][]byte{}}

	res, err := h.runCached(m, "run-1", cachedSpec, runs.PipelineInput{})
	if err != nil || res.Status != runs.StatusSucceeded {
		t.Fatalf("run 1: %v", err)
	}
	for _, id := range []string{"prep", "train"} {
		n := wantNode(t, res, id, runs.NodeSucceeded, 1)
		if n.Cache == nil || n.Cache.Hit || n.Cache.Reason != nodecache.ReasonNoEntry {
			t.Errorf("run 1 %s: cache %+v, want a miss with no entry", id, n.Cache)
		}
	}
	if n := res.Node("ship"); n.Cache != nil {
		t.Errorf("ship is not cached, got %+v", n.Cache)
	}
	if strings.Join(m.stores, ",") != "prep,train" {
		t.Errorf("run 1 stored %v", m.stores)
	}

	res, err = h.runCached(m, "run-2", cachedSpec, runs.PipelineInput{})
	if err != nil {
		t.Fatalf("run 2: %v", err)
	}
	for _, id := range []string{"prep", "train"} {
		n := wantNode(t, res, id, runs.NodeSucceeded, 0)
		if n.Cache == nil || !n.Cache.Hit || n.Cache.Run != "run-1" {
			t.Errorf("run 2 %s: cache %+v, want a hit from run-1", id, n.Cache)
		}
	}
	if ship := wantNode(t, res, "ship", runs.NodeSucceeded, 1); ship.Outputs["model"] != float64(2) {
		t.Errorf("ship got %v from the cached train", ship.Outputs["model"])
	}
	if strings.Join(h.order, ",") != "ship" || len(m.stores) != 0 {
		t.Errorf("run 2 ran %v and stored %v; want only ship run, nothing stored", h.order, m.stores)
	}

	res, err = h.runCached(m, "run-3", cachedSpec, runs.PipelineInput{Params: map[string]any{"epochs": 3}})
	if err != nil {
		t.Fatalf("run 3: %v", err)
	}
	if n := res.Node("prep"); !n.Cache.Hit {
		t.Errorf("run 3 prep: %+v, want a hit", n.Cache)
	}
	if n := res.Node("train"); n.Cache.Hit || n.Cache.Reason != "param epochs 2 -> 3" {
		t.Errorf("run 3 train: %+v, want the miss 'param epochs 2 -> 3'", n.Cache)
	}

	_, err = h.runCached(m, "run-4", cachedSpec, runs.PipelineInput{Params: map[string]any{"epochs": 4, "broken": true}})
	res = mustFail(t, err)
	wantNode(t, res, "train", runs.NodeFailed, 1)
	if strings.Join(m.stores, ",") != "" {
		t.Errorf("run 4 stored %v; a failed node is never stored", m.stores)
	}

	res, err = h.runCached(m, "run-5", cachedSpec, runs.PipelineInput{NoCache: true})
	if err != nil {
		t.Fatalf("run 5: %v", err)
	}
	if n := res.Node("prep"); n.Cache.Hit || n.Cache.Reason != "recomputed: --no-cache" {
		t.Errorf("run 5 prep: %+v", n.Cache)
	}
	if strings.Join(h.order, ",") != "prep,train,ship" || strings.Join(m.stores, ",") != "prep,train" {
		t.Errorf("run 5 ran %v, stored %v", h.order, m.stores)
	}

	res, err = h.runCached(m, "run-6", cachedSpec, runs.PipelineInput{Refresh: []string{"train"}})
	if err != nil {
		t.Fatalf("run 6: %v", err)
	}
	if !res.Node("prep").Cache.Hit || res.Node("train").Cache.Reason != "recomputed: --refresh train" {
		t.Errorf("run 6: prep %+v, train %+v", res.Node("prep").Cache, res.Node("train").Cache)
	}

	_, err = h.runCached(m, "run-7", cachedSpec, runs.PipelineInput{Refresh: []string{"nope"}})
	if err == nil || !strings.Contains(err.Error(), `refresh "nope": pipeline cached has no such node`) {
		t.Errorf("refresh of a missing node: %v", err)
	}
}
