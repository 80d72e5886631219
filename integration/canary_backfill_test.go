package integration

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
)

// olderCanarySpec is canarySpec for a backfill's candidate, v2, trained
// for an older date than production's v3, with short bakes; force is
// what the spec writes for force ("" for none).
func olderCanarySpec(force string) string {
	s := specEdit(canarySpec, "      version: v2\n", "      version: v2\n"+force)
	return s
}

func (e *canaryEnv) startDated(t *testing.T, spec, logicalDate string) string {
	t.Helper()
	run, err := runs.Start(t.Context(), tclient, runs.Request{Spec: []byte(spec), SpecFile: "canary-it.yaml",
		Params: e.params("3s"), TaskQueue: e.queue, LogicalDate: logicalDate})
	if err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// deployedColumn is the DEPLOYED cell `retrain runs list` shows for run id.
func deployedColumn(t *testing.T, id string) string {
	t.Helper()
	out, err := retrainCLI(t, "runs", "list", "--pipeline", "canary-it", "--limit", "50")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == id {
			t.Logf("runs list: %s", line)
			return line
		}
	}
	t.Fatalf("runs list does not show %s:\n%s", id, out)
	return ""
}

// TestCanaryBackfillOlderDate: a backfill's canary of a model trained for
// 2026-11-26 while production serves one for 2026-11-28 does not start:
// production unchanged, no traffic webhook, the run says why; with
// `force: true` in the spec it runs, promotes, and the move is recorded
// as forced; runs list names both in DEPLOYED.
func TestCanaryBackfillOlderDate(t *testing.T) {
	parallelFor(t, 18*time.Second)
	dates := map[string]string{"v2": "2026-11-26T00:00:00Z", "v3": "2026-11-28T00:00:00Z"}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		e := newCanaryEnvDated(t, healthy, dates)
		startStoreWorker(t, e.queue, e.srv)
		if _, err := e.reg.Promote(t.Context(), "ctr", "production", "v3", tester, "nightly of 2026-11-28"); err != nil {
			t.Fatal(err)
		}
		id := e.startDated(t, olderCanarySpec(""), "2026-11-26")
		res := wait(t, id)
		wantStatus(t, res, runs.StatusSucceeded)
		decision, steps, out := canaryOutputs(t, res)
		t.Logf("canary: %s", out["summary"])
		if decision != "superseded" || len(steps) != 0 || out["moved"] != false || out["superseded_by"] != "v3" || out["superseded_date"] != "2026-11-28" {
			t.Fatalf("decision %q after %d steps, outputs %v", decision, len(steps), out)
		}
		if r, _ := out["reason"].(string); !strings.Contains(r, "no traffic sent") || !strings.Contains(r, "2026-11-26") {
			t.Errorf("reason %q does not say why", r)
		}
		e.wantMoves(t, []string{"promote:->v1", "promote:v1->v3"}, []string{}, []string{})
		if got := deployedColumn(t, id); !strings.Contains(got, "ctr@v2 (superseded by v3)") {
			t.Errorf("DEPLOYED does not say superseded: %s", got)
		}
	})
	t.Run("forced", func(t *testing.T) {
		t.Parallel()
		e := newCanaryEnvDated(t, healthy, dates)
		startStoreWorker(t, e.queue, e.srv)
		if _, err := e.reg.Promote(t.Context(), "ctr", "production", "v3", tester, "nightly of 2026-11-28"); err != nil {
			t.Fatal(err)
		}
		id := e.startDated(t, olderCanarySpec("      force: true\n"), "2026-11-26")
		res := wait(t, id)
		wantStatus(t, res, runs.StatusSucceeded)
		decision, _, out := canaryOutputs(t, res)
		t.Logf("canary: %s", out["summary"])
		if decision != "promoted" || out["moved"] != true || out["forced"] != true {
			t.Fatalf("decision %q, outputs %v", decision, out)
		}
		e.wantMoves(t, []string{"promote:->v1", "promote:v1->v3", "promote:v3->v2"}, nil, []string{"v3/v2@10", "v3/v2@50", "v2/v2@100"})
		h, err := e.reg.History(t.Context(), "ctr", "production")
		if err != nil {
			t.Fatal(err)
		}
		last := h[len(h)-1]
		t.Logf("history: #%d %s %s -> %s forced=%v by %s (run %s): %s", last.Seq, last.Kind, last.From, last.To, last.Forced, last.Actor.Name, last.Actor.Run, last.Reason)
		if !last.Forced || last.Actor.Run != id {
			t.Errorf("promotion recorded %+v, want forced by run %s", last, id)
		}
		if got := deployedColumn(t, id); !strings.Contains(got, "ctr@v2 (forced)") {
			t.Errorf("DEPLOYED does not name the canary's promotion: %s", got)
		}
	})
}

// TestCanaryKeepsTrainingSnapshot: a canary registers its candidate as
// deploy does, with data_snapshots; after its promotion, table
// maintenance with --keep-last 0 keeps the snapshot the version trained
// on, which it would expire otherwise.
func TestCanaryKeepsTrainingSnapshot(t *testing.T) {
	parallelFor(t, 19*time.Second)
	l := newTestLake(t)
	ctx := t.Context()
	tbl, err := l.cat.Load(ctx, "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	// The model trains on today's table; a backfill then promotes into
	// it, so that snapshot is no longer main's head.
	trained := tbl.CurrentSnapshot().SnapshotID
	wantStatus(t, l.run(t, runs.Request{Pipeline: "backfill", Params: map[string]any{"start_date": demoStart, "end_date": demoEnd}}), runs.StatusSucceeded)
	e := newCanaryEnvDated(t, healthy, map[string]string{"v2": notRegistered})
	startStoreWorker(t, e.queue, e.srv)
	spec := strings.Replace(canarySpec, "      version: v2\n", "      version: v2\n      dir: "+modelDir(t, "weights of v2")+
		"\n      data_snapshots: [\"ml.training@"+strconv.FormatInt(trained, 10)+"\"]\n", 1)
	id := e.startDated(t, spec, "")
	res := wait(t, id)
	wantStatus(t, res, runs.StatusSucceeded)
	if decision, _, out := canaryOutputs(t, res); decision != "promoted" || out["moved"] != true {
		t.Fatalf("decision %q, outputs %v", decision, out)
	}
	v, err := e.reg.Get(ctx, "ctr", "v2")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ctr@v2 data_snapshots %v", v.DataSnapshots)
	keep := map[int64]string{}
	ids, err := e.reg.TrainedSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id, refs := range ids {
		keep[id] = "trained " + strings.Join(refs, ", ")
	}
	if keep[trained] == "" {
		t.Fatalf("the registry does not protect snapshot %d: %v", trained, keep)
	}
	// Without the registry's word, --keep-last 0 would expire it: a dry run
	// shows it.
	dry, err := l.cat.MaintainTable(ctx, "ml.training", lake.MaintainOptions{Expire: true, KeepLast: 0, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dry.Expired, trained) {
		t.Fatalf("a dry run without the models' snapshots would not expire %d (expired %v): the test shows nothing", trained, dry.Expired)
	}
	r, err := l.cat.MaintainTable(ctx, "ml.training", lake.MaintainOptions{Expire: true, KeepLast: 0, Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("maintain --keep-last 0: expired %v, kept %d (%s)", r.Expired, trained, keep[trained])
	tbl, err = l.cat.Load(ctx, "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Metadata().SnapshotByID(trained) == nil {
		t.Fatalf("snapshot %d that ctr@v2 trained on was expired", trained)
	}
}
