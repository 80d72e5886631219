package integration

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// rerunPipeline is ctr-retrain without its on_failure nodes (whose
// rollback of the promotion would make a rerun promote again: that case
// is TestRerun's last), named ctr-rerun, with evaluate's candidate
// pointing at a folder that does not exist when broken.
func rerunPipeline(t *testing.T, broken, onFailure bool) []byte {
	t.Helper()
	b, err := fs.ReadFile(examples.FS, "ctr-retrain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec := strings.Replace(string(b), "name: ctr-retrain", "name: ctr-rerun", 1)
	if !onFailure {
		spec = spec[:strings.Index(spec, "\non_failure:")] + "\n"
	}
	if broken {
		const cand = "candidate: ${nodes.train.outputs.model_uri}"
		if !strings.Contains(spec, cand) {
			t.Fatal("ctr-retrain's evaluate changed: update rerunPipeline")
		}
		spec = strings.Replace(spec, cand, cand+"no-such-folder/", 1)
	}
	return []byte(spec)
}

// ranAndReused splits a rerun's nodes into those it ran and those it
// took over, in plan order.
func ranAndReused(res *runs.Result) (ran, reused []string) {
	for _, n := range res.Nodes {
		switch {
		case n.ReusedFrom != "":
			reused = append(reused, n.ID)
		case n.Status == runs.NodeSucceeded || n.Status == runs.NodeFailed:
			ran = append(ran, n.ID)
		}
	}
	return ran, reused
}

// TestRerun: a ctr-retrain run whose evaluate node fails (a typo in its
// candidate folder), the spec fixed in the worker's pipeline folder, then
// `retrain rerun RUN`: only evaluate and what follows run, the rest is the
// first run's, and the deployed version records which run computed each
// node. Then `--from train`; a rerun whose split manifest was deleted
// from the store (split runs again, saying so); the bad inputs (a run
// that does not exist, a --from node the pipeline lacks); and a run whose
// on_failure rolled the promotion back, which a rerun promotes again.
func TestRerun(t *testing.T) {
	parallelFor(t, 40*time.Second)
	e := newRetrainEnv(t, false)
	dir := t.TempDir()
	file := filepath.Join(dir, "ctr-rerun.yaml")
	write := func(spec []byte) {
		if err := os.WriteFile(file, spec, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(rerunPipeline(t, true, false))
	startWorkerWith(t, worker.Config{TaskQueue: e.queue, Lake: e.lakeCfg, Store: storage.Config{S3: e.srv.Config("")}, PipelinesDir: dir})
	dataDir := t.TempDir()
	if err := storage.WriteDevConnection(dataDir, e.srv.Config("")); err != nil {
		t.Fatal(err)
	}
	cliOut := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		root := cli.NewRoot(&cli.App{Out: &out, Err: &errOut, LogLevel: "warn"}, "retrain")
		root.SetArgs(append(args, "--address", server.FrontendAddress(), "--namespace", server.Namespace()))
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		err := root.ExecuteContext(ctx)
		if err != nil {
			return out.String(), fmt.Errorf("%w\n%s", err, errOut.String())
		}
		return out.String(), nil
	}
	rerun := func(t *testing.T, args ...string) *runs.Result {
		t.Helper()
		start := time.Now()
		out, err := cliOut(append([]string{"rerun", "--task-queue", e.queue}, args...)...)
		if err != nil {
			t.Fatalf("retrain rerun %s: %v", strings.Join(args, " "), err)
		}
		id := strings.TrimSpace(out)
		res, err := runs.Wait(context.Background(), tclient, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		status, _ := cliOut("status", id)
		t.Logf("retrain rerun %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), status)
		return res
	}
	params := map[string]any{"start_date": retrainStart, "end_date": retrainEnd}

	// The first run fails at evaluate.
	first := runRequest(t, runs.Request{Pipeline: "ctr-rerun", Params: params, TaskQueue: e.queue}, 4*time.Minute)
	wantStatus(t, first, runs.StatusFailed)
	if ev := node(t, first, "evaluate"); ev.Status != runs.NodeFailed {
		t.Fatalf("evaluate %s, want failed: %s", ev.Status, ev.Error)
	}
	t.Logf("first run %s took %s: evaluate failed: %s", first.ID, first.EndedAt.Sub(first.StartedAt).Round(time.Millisecond), node(t, first, "evaluate").Error)
	write(rerunPipeline(t, false, false)) // fixed

	var second *runs.Result
	t.Run("rerun runs evaluate and what follows", func(t *testing.T) {
		second = rerun(t, first.ID)
		wantStatus(t, second, runs.StatusSucceeded)
		ran, reused := ranAndReused(second)
		if want := []string{"evaluate", "gate", "deploy", "smoke"}; !slices.Equal(ran, want) {
			t.Errorf("ran %v, want %v", ran, want)
		}
		if want := []string{"stage_user", "stage_ad", "stats_user", "stats_ad", "promote", "split", "train"}; !slices.Equal(reused, want) {
			t.Errorf("reused %v, want %v", reused, want)
		}
		if second.ReusedFrom != first.ID || second.SpecDigest == "" || second.SpecDigest == first.SpecDigest {
			t.Errorf("reused_from %q (want %q), spec %q (first %q)", second.ReusedFrom, first.ID, second.SpecDigest, first.SpecDigest)
		}
		if got := node(t, second, "train").Outputs["model_uri"]; got != node(t, first, "train").Outputs["model_uri"] {
			t.Errorf("train's model_uri %v, first run's %v", got, node(t, first, "train").Outputs["model_uri"])
		}
		// The version records its provenance: the reused nodes are the
		// first run's, evaluate this one's.
		v, err := e.reg.Get(context.Background(), "ctr", node(t, second, "deploy").Outputs["version"].(string))
		if err != nil {
			t.Fatal(err)
		}
		p := v.Provenance
		if p == nil || p.SpecDigest != second.SpecDigest || p.Trainer != "train" || p.Params["seed"] == nil || v.PipelineRun != second.ID {
			t.Fatalf("provenance: %+v (run %s)", p, v.PipelineRun)
		}
		runOf := map[string]string{}
		for _, o := range p.Upstream {
			runOf[o.Node] = o.Run
		}
		if runOf["train"] != first.ID || runOf["promote"] != first.ID || runOf["evaluate"] != second.ID || runOf["gate"] != second.ID {
			t.Errorf("upstream runs: %v", runOf)
		}
		list, err := cliOut("runs", "list", "--pipeline", "ctr-rerun")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("retrain runs list --pipeline ctr-rerun:\n%s", list)
		if !strings.Contains(list, "REUSED FROM") || !strings.Contains(list, first.ID) {
			t.Errorf("runs list does not name the reused run:\n%s", list)
		}
	})
	if second == nil || second.Status != runs.StatusSucceeded {
		t.FailNow()
	}

	t.Run("from train, another seed", func(t *testing.T) {
		res := rerun(t, second.ID, "--from", "train", "--param", "seed=2")
		wantStatus(t, res, runs.StatusSucceeded)
		ran, reused := ranAndReused(res)
		if want := []string{"train", "evaluate", "gate", "deploy", "smoke"}; !slices.Equal(ran, want) {
			t.Errorf("ran %v, want %v", ran, want)
		}
		if want := []string{"stage_user", "stage_ad", "stats_user", "stats_ad", "promote", "split"}; !slices.Equal(reused, want) {
			t.Errorf("reused %v, want %v", reused, want)
		}
		// A result taken over twice names the run that computed it.
		if got := node(t, res, "split").ReusedFrom; got != first.ID || res.ReusedFrom != second.ID {
			t.Errorf("split reused from %q (want %q), run reused %q (want %q)", got, first.ID, res.ReusedFrom, second.ID)
		}
		if got := node(t, res, "train").NotReused; got != "named by --from" {
			t.Errorf("train: %q", got)
		}
		if got := node(t, res, "evaluate").NotReused; got != "downstream of --from train" {
			t.Errorf("evaluate: %q", got)
		}
	})

	t.Run("split manifest gone", func(t *testing.T) {
		manifest := node(t, second, "split").Outputs["manifest"].(string)
		// The manifest output is a key of the store; uri is its s3:// URI.
		if err := e.store.Delete(context.Background(), manifest); err != nil {
			t.Fatal(err)
		}
		res := rerun(t, second.ID, "--from", "gate")
		wantStatus(t, res, runs.StatusSucceeded)
		ran, reused := ranAndReused(res)
		if want := []string{"split", "train", "evaluate", "gate", "deploy", "smoke"}; !slices.Equal(ran, want) {
			t.Errorf("ran %v, want %v", ran, want)
		}
		if want := []string{"stage_user", "stage_ad", "stats_user", "stats_ad", "promote"}; !slices.Equal(reused, want) {
			t.Errorf("reused %v, want %v", reused, want)
		}
		if got := node(t, res, "split").NotReused; !strings.Contains(got, "is gone") {
			t.Errorf("split: %q", got)
		}
		if got := node(t, res, "train").NotReused; got != "upstream node split runs again" {
			t.Errorf("train: %q", got)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		count := func() int {
			list, err := runs.List(context.Background(), tclient, runs.ListOptions{Pipeline: "ctr-rerun", Namespace: server.Namespace(), Summary: true, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			return len(list)
		}
		before := count()
		_, err := cliOut("rerun", "ctr-rerun-no-such-run")
		if err == nil || !strings.Contains(err.Error(), `run "ctr-rerun-no-such-run" does not exist`) {
			t.Errorf("rerun of a missing run: %v", err)
		}
		_, err = cliOut("rerun", second.ID, "--from", "trian")
		if err == nil || !strings.Contains(err.Error(), `--from "trian": run `+second.ID+`'s pipeline has no node "trian"`) {
			t.Errorf("--from a missing node: %v", err)
		}
		t.Logf("bad input refused: %v", err)
		time.Sleep(time.Second) // visibility lags a start a little
		if after := count(); after != before {
			t.Errorf("%d runs before the bad reruns, %d after", before, after)
		}
	})

	t.Run("model diff", func(t *testing.T) {
		vs, err := e.reg.List(context.Background(), "ctr")
		if err != nil || len(vs) < 2 {
			t.Fatalf("versions %v: %v", vs, err)
		}
		a, b := vs[0], vs[len(vs)-1]
		var out bytes.Buffer
		root := cli.NewRoot(&cli.App{Out: &out, Err: &out, LogLevel: "warn"}, "retrain")
		root.SetArgs([]string{"model", "diff", "ctr", a.Version, b.Version, "--data-dir", dataDir})
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("model diff: %v\n%s", err, out.String())
		}
		t.Logf("retrain model diff ctr %s %s:\n%s", a.Version, b.Version, out.String())
		if !strings.Contains(out.String(), "same: ") || !strings.Contains(out.String(), "seed: 1 -> 2") ||
			!strings.Contains(out.String(), "in the same run): stage_user, stage_ad, stats_user, stats_ad, promote, split") {
			t.Errorf("diff: %s", out.String())
		}
		snap := node(t, second, "promote").Outputs["snapshot_id"].(string)
		out.Reset()
		root = cli.NewRoot(&cli.App{Out: &out, Err: &out, LogLevel: "warn"}, "retrain")
		root.SetArgs([]string{"model", "list", "--trained-on", "ml.training@" + snap, "--data-dir", dataDir})
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("model list --trained-on: %v\n%s", err, out.String())
		}
		t.Logf("retrain model list --trained-on ml.training@%s:\n%s", snap, out.String())
		for _, v := range vs {
			if models.TrainedOn(v, "ml.training", mustID(t, snap)) != strings.Contains(out.String(), v.Ref()+" ") {
				t.Errorf("%s listed wrongly:\n%s", v.Ref(), out.String())
			}
		}
	})

	t.Run("on_failure undid the promotion", func(t *testing.T) {
		if !longTests(t) {
			t.Skip("a failed run and a rerun that promotes again (45 s): the long form runs it")
		}
		// Fresh tables, as the promotion of the same features again
		// needs (see TestCTRRetrainScenarios).
		e.writeData(t, demodata.Broken{})
		write(rerunPipeline(t, true, true))
		failed := runRequest(t, runs.Request{Pipeline: "ctr-rerun", Params: params, TaskQueue: e.queue}, 4*time.Minute)
		wantStatus(t, failed, runs.StatusFailed)
		write(rerunPipeline(t, false, true))
		res := rerun(t, failed.ID)
		wantStatus(t, res, runs.StatusSucceeded)
		ran, reused := ranAndReused(res)
		if want := []string{"stage_user", "stage_ad", "stats_user", "stats_ad"}; !slices.Equal(reused, want) {
			t.Errorf("reused %v, want %v (ran %v)", reused, want, ran)
		}
		if got := node(t, res, "promote").NotReused; !strings.Contains(got, "on_failure node rollback_table undid it") {
			t.Errorf("promote: %q", got)
		}
	})
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	_, id, err := models.ParseTableSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
