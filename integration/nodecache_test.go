package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
)

// cacheCheckSpec is a small ctr-retrain: stage one feature group,
// profile it, promote it, split, train with a shell trainer. nullRate is
// split's max_null_rate and version the defaults' cache version.
func cacheCheckSpec(dir, nullRate string, version int) []byte {
	return []byte(fmt.Sprintf(`name: cache-check
params:
  start_date: {type: string, default: %q}
  end_date: {type: string, default: %q}
  epochs: {type: int, default: 1}
defaults:
  retry: {max_attempts: 1}
  cache: {version: %d}
nodes:
  - id: stage_user
    type: stage_features
    with: {training_table: ml.training, feature_table: features.user_daily, keys: [user_id], start_date: "${params.start_date}",
           end_date: "${params.end_date}", alignment: previous_day, features: [activity, ctr_7d], prefix: u_}
  - id: stats_user
    type: feature_stats
    needs: [stage_user]
    with: {table: "${nodes.stage_user.outputs.staging_table}", snapshot_id: "${nodes.stage_user.outputs.snapshot_id}"}
  - id: promote
    type: promote_features
    needs: [stats_user]
    with: {training_table: ml.training, staging_tables: ["${nodes.stage_user.outputs.staging_table}"],
           start_date: "${params.start_date}", end_date: "${params.end_date}"}
  - id: split
    type: split
    needs: [promote]
    with: {table: ml.training, snapshot_id: "${nodes.promote.outputs.snapshot_id}", start_date: "${params.start_date}",
           end_date: "${params.end_date}", dense: [u_activity, u_ctr_7d], sparse: [user_id, ad_id], max_null_rate: %s, eval_days: 1}
  - id: train
    type: train
    needs: [split]
    cache: {files: [%q]}
    with: {trainer: command, data: "${nodes.split.outputs.uri}", argv: [sh, %q, "${params.epochs}"]}
`, cacheStart, cacheEnd, version, nullRate, filepath.Join(dir, "lib", "*.sh"), filepath.Join(dir, "train.sh")))
}

const (
	cacheStart = "2026-11-01"
	cacheEnd   = "2026-11-03"
)

// cacheWant is what a run must show of a node: served from the cache,
// or computed with a reason that holds the text.
type cacheWant struct {
	hit    bool
	reason string
}

// TestNodeCacheMisses runs a small retrain pipeline, all of it cached,
// once and then after each kind of change, and checks which nodes were
// served from the cache and why each other one was not: nothing changed
// (every node hits, the promotion finds itself in place); a param only
// train reads; a `with` field of split; a new snapshot of the feature
// table; an edited trainer script; a bumped cache version; a staging
// snapshot expired by table maintenance under a cached stage result. A
// node downstream of a recomputed one misses only when what it reads
// changed.
func TestNodeCacheMisses(t *testing.T) {
	parallelFor(t, 50*time.Second)
	e := newRetrainEnvData(t, true, demodata.Config{Rows: 4000, Days: 3, Seed: 1})
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("lib/util.sh", "echo util\n")
	write("train.sh", `mkdir -p "$RETRAIN_MODEL_OUT" && echo "epochs $1" > "$RETRAIN_MODEL_OUT/model.txt"`+"\n")

	nodes := []string{"stage_user", "stats_user", "split", "train"}
	run := func(step string, spec []byte, params map[string]any, want map[string]cacheWant) *runs.Result {
		t.Helper()
		started := time.Now()
		res := runRequest(t, runs.Request{Spec: spec, SpecFile: "cache-check.yaml", Params: params, TaskQueue: e.queue}, 3*time.Minute)
		wantStatus(t, res, runs.StatusSucceeded)
		var notes []string
		for _, id := range nodes {
			n := node(t, res, id)
			w := want[id]
			note := n.Cache.Note(time.Now())
			notes = append(notes, id+": "+note)
			switch {
			case n.Cache == nil:
				t.Errorf("%s: %s has no cache note", step, id)
			case n.Cache.Hit != w.hit:
				t.Errorf("%s: %s %q; want hit=%v", step, id, note, w.hit)
			case !w.hit && !strings.Contains(n.Cache.Reason, w.reason):
				t.Errorf("%s: %s missed with %q; want a reason holding %q", step, id, n.Cache.Reason, w.reason)
			}
		}
		t.Logf("%s (%s): %s; promote: %v", step, time.Since(started).Round(time.Millisecond), strings.Join(notes, "; "), node(t, res, "promote").Outputs["summary"])
		return res
	}
	hits := func(except map[string]cacheWant) map[string]cacheWant {
		w := map[string]cacheWant{}
		for _, id := range nodes {
			w[id] = cacheWant{hit: true}
		}
		for k, v := range except {
			w[k] = v
		}
		return w
	}
	spec := cacheCheckSpec(dir, "0.5", 0)

	first := run("first run", spec, nil, map[string]cacheWant{
		"stage_user": {reason: "no entry"}, "stats_user": {reason: "no entry"}, "split": {reason: "no entry"}, "train": {reason: "no entry"}})
	promoted := node(t, first, "promote").Outputs["snapshot_id"]

	res := run("unchanged", spec, nil, hits(nil))
	if p := node(t, res, "promote").Outputs; p["already"] != true || p["snapshot_id"] != promoted {
		t.Errorf("unchanged: promote %v; want the first run's snapshot %v, already in place", p["summary"], promoted)
	}

	run("param epochs", spec, map[string]any{"epochs": 2}, hits(map[string]cacheWant{"train": {reason: "param epochs 1 -> 2"}}))

	spec = cacheCheckSpec(dir, "0.9", 0)
	run("split with", spec, map[string]any{"epochs": 2}, hits(map[string]cacheWant{
		"split": {reason: "with.max_null_rate 0.5 -> 0.9"}, "train": {reason: "with.data …"}}))

	// A new snapshot of features.user_daily alone (the same rows): the
	// other demo tables are written aside.
	if _, err := demodata.Write(ctx, e.cat, demodata.Config{Rows: 4000, Days: 3, Seed: 1},
		demodata.Tables{Training: "features.scratch_training", Users: "features.user_daily", Ads: "features.scratch_ads"}, true, quiet); err != nil {
		t.Fatal(err)
	}
	run("feature snapshot", spec, map[string]any{"epochs": 2}, map[string]cacheWant{
		"stage_user": {reason: "features.user_daily snapshot"}, "stats_user": {reason: "with.snapshot_id"},
		"split": {reason: "with.snapshot_id"}, "train": {reason: "with.data"}})

	write("train.sh", `mkdir -p "$RETRAIN_MODEL_OUT" && echo "epochs: $1" > "$RETRAIN_MODEL_OUT/model.txt"`+"\n")
	run("trainer script", spec, map[string]any{"epochs": 2}, hits(map[string]cacheWant{"train": {reason: filepath.Join(dir, "train.sh") + " changed"}}))

	write("lib/util.sh", "echo util 2\n")
	run("imported file", spec, map[string]any{"epochs": 2}, hits(map[string]cacheWant{"train": {reason: filepath.Join("lib", "util.sh") + " changed"}}))

	// Version 1 recomputes everything; its stage re-stages, so the
	// staging snapshot the version-0 entry points to is no longer main's
	// head, and maintenance expires it.
	run("cache version", cacheCheckSpec(dir, "0.9", 1), map[string]any{"epochs": 2}, map[string]cacheWant{
		"stage_user": {reason: "cache version 0 -> 1"}, "stats_user": {reason: "cache version 0 -> 1"},
		"split": {reason: "cache version 0 -> 1"}, "train": {reason: "cache version 0 -> 1"}})
	staging := node(t, first, "stage_user").Outputs["staging_table"].(string)
	if _, err := e.cat.MaintainTable(ctx, staging, lake.MaintainOptions{Expire: true, ExpireOlderThan: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	run("expired snapshot", spec, map[string]any{"epochs": 2}, map[string]cacheWant{
		"stage_user": {reason: "expired"}, "stats_user": {reason: "with.snapshot_id"},
		"split": {reason: "with.snapshot_id"}, "train": {reason: "with.data"}})
}
