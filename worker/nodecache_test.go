package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/nodecache"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestCacheLookupAtS3Latency measures what the node cache costs a node on
// a real S3 server (versitygw) behind 20 ms of latency a request, as
// in-region S3 answers: a hit (GET the entry, HEAD what its outputs point
// to, as split and train check), a miss explained against the last key
// (two GETs) and a store (two PUTs). A hit must cost under 50 ms of
// lookup beyond the requests' own latency floor and is logged.
func TestCacheLookupAtS3Latency(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	srv := s3test.Start(t)
	const latency = 20 * time.Millisecond
	p, err := s3fault.Start(s3fault.Config{Target: srv.Endpoint, Delay: latency})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := srv.Config("cache")
	cfg.Endpoint = p.URL()
	ctx := context.Background()
	st, err := s3store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutBytes(ctx, "models/m/model.bin", []byte("weights")); err != nil {
		t.Fatal(err)
	}
	typ := nodetype.New(dags.NodeType{Name: "fit"}, func(context.Context, nodetype.Input, map[string]any) (map[string]any, error) {
		return nil, nil
	}).WithCache(nodetype.Cache{Version: 1, Verify: func(ctx context.Context, _ nodetype.Input, out map[string]any) (string, error) {
		if _, err := st.Head(ctx, out["model"].(string)); err != nil {
			return "model gone", nil
		}
		return "", nil
	}})
	c := newNodeCache(st, []nodetype.Type{typ}, "w", slog.New(slog.DiscardHandler))
	look := func(epochs int) (nodetype.CacheLookupResult, time.Duration) {
		in := nodetype.CacheLookup{Input: nodetype.Input{Pipeline: "p", RunID: "r1", Node: "fit", Type: "fit", With: map[string]any{"epochs": epochs}}}
		started := time.Now()
		res, _ := c.lookup(ctx, in)
		return res, time.Since(started)
	}
	res, missTook := look(1)
	if res.Hit || res.Reason != nodecache.ReasonNoEntry {
		t.Fatalf("first lookup: %+v", res)
	}
	started := time.Now()
	if err := c.Store(ctx, nodetype.CacheStore{Pipeline: "p", Run: "r1", Node: "fit", Components: *res.Components,
		Result: nodetype.Result{Outputs: map[string]any{"model": "models/m/model.bin"}, Attempt: 1}}); err != nil {
		t.Fatal(err)
	}
	storeTook := time.Since(started)
	const n = 10
	var hitTotal time.Duration
	for range n {
		res, took := look(1)
		if !res.Hit || res.Run != "r1" {
			t.Fatalf("lookup after store: %+v", res)
		}
		hitTotal += took
	}
	res, explainTook := look(2)
	if res.Hit || res.Reason != "with.epochs 1 -> 2" {
		t.Fatalf("changed epochs: %+v", res)
	}
	hit := hitTotal / n
	t.Logf("at %v a request: hit %v (GET entry + HEAD output), first miss %v, explained miss %v (2 GETs), store %v (2 PUTs)",
		latency, hit.Round(time.Millisecond), missTook.Round(time.Millisecond), explainTook.Round(time.Millisecond), storeTook.Round(time.Millisecond))
	if hit > 50*time.Millisecond+2*latency {
		t.Errorf("a hit took %v on average: more than 50 ms beyond its two requests' latency", hit)
	}
}
