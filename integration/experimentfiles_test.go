package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// TestFeatureExperimentFiles runs dags/examples/feature-experiment-files.yaml
// on the small demo data written as Parquet files in date= folders
// (`retrain data demo --files`), with no lake: the candidate's split joins
// the user_signals folder point-in-time and its AUC lifts over the
// control's, so the gate passes; joined with the noise_daily folder it does
// not, and the gate rejects it. Both splits read the same click rows.
func TestFeatureExperimentFiles(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	if _, err := demodata.WriteFiles(dir, retrainData); err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	queue := newQueue(t)
	startWorkerWith(t, worker.Config{TaskQueue: queue, Store: storage.Config{S3: srv.Config("")},
		Env: progenv.Policy{AllowPaths: []string{dir}}})
	for _, c := range []struct {
		features  string
		columns   []any
		alignment string
		wantPass  bool
	}{
		{"user_signals", []any{"log_activity", "logit_ctr_7d", "recency"}, "previous_day", true},
		{"noise_daily", []any{"noise_a", "noise_b"}, "as_of", false},
	} {
		t.Run(c.features, func(t *testing.T) {
			res := runRequest(t, runs.Request{Pipeline: "feature-experiment-files", TaskQueue: queue, Params: map[string]any{
				"data_dir": dir, "features": c.features, "columns": c.columns, "alignment": c.alignment,
				"start_date": retrainStart, "end_date": retrainEnd,
			}}, 4*time.Minute)
			wantStatus(t, res, runs.StatusSucceeded)
			cand := node(t, res, "evaluate_candidate").Outputs["auc"].(float64)
			ctrl := node(t, res, "evaluate_control").Outputs["auc"].(float64)
			gate := node(t, res, "gate")
			split := node(t, res, "split_candidate")
			t.Logf("%s (%s): candidate AUC %.4f, control AUC %.4f, lift %+.4f; gate: %v; split: %v", c.features, c.alignment, cand, ctrl, cand-ctrl,
				gate.Outputs["summary"], split.Outputs["summary"])
			if gate.Outputs["passed"] != c.wantPass {
				t.Fatalf("gate passed = %v, want %v: %v", gate.Outputs["passed"], c.wantPass, gate.Outputs["reason"])
			}
			if c.wantPass && cand <= ctrl {
				t.Errorf("the gate passed without an AUC lift: %.4f vs %.4f", cand, ctrl)
			}
			ctl := node(t, res, "split_control")
			for _, k := range []string{"train_rows", "eval_rows"} {
				if ctl.Outputs[k] != split.Outputs[k] {
					t.Errorf("%s: control %v, candidate %v: the splits must hold the same rows", k, ctl.Outputs[k], split.Outputs[k])
				}
			}
			if j, _ := split.Outputs["joined"].([]any); len(j) != len(c.columns) {
				t.Errorf("joined columns %v, want %d", split.Outputs["joined"], len(c.columns))
			}
		})
	}
}

// TestSplitFilesRunTimezone: a run in Europe/Berlin (the zone a schedule
// gives its runs; here the request's) splits click logs by their
// event_ts in Berlin's days, though the split names no zone, and the
// same split in a UTC run by UTC days. The rows each trained on (the
// window's first day) and held out (its second) are those the test counts
// by event time in each zone, reading the files itself.
func TestSplitFilesRunTimezone(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	if _, err := demodata.WriteFiles(dir, retrainData); err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	queue := newQueue(t)
	startWorkerWith(t, worker.Config{TaskQueue: queue, Store: storage.Config{S3: srv.Config("")},
		Env: progenv.Policy{AllowPaths: []string{dir}}})
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	byDay := map[string]map[string]int{"UTC": {}, "Europe/Berlin": {}}
	paths, _ := filepath.Glob(filepath.Join(dir, demodata.ClicksFolder, "*", "*.parquet"))
	for _, p := range paths {
		pf, err := file.OpenParquetFile(p, false)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range tbl.Column(tbl.Schema().FieldIndices("event_ts")[0]).Data().Chunks() {
			ts := c.(*array.Timestamp)
			for i := range ts.Len() {
				at := ts.Value(i).ToTime(arrow.Microsecond)
				byDay["UTC"][at.UTC().Format(time.DateOnly)]++
				byDay["Europe/Berlin"][at.In(berlin).Format(time.DateOnly)]++
			}
		}
		tbl.Release()
		pf.Close()
	}
	spec := fmt.Sprintf(`name: events-by-day
nodes:
  - id: split
    type: split
    with:
      files: %s/
      date_column: event_ts
      start_date: "2026-11-02"
      end_date: "2026-11-03"
      sparse: [user_id, ad_id]
      eval_days: 1
`, filepath.Join(dir, demodata.ClicksFolder))
	got := map[string][2]float64{}
	for _, zone := range []string{"UTC", "Europe/Berlin"} {
		tz := zone
		if zone == "UTC" {
			tz = "" // a run with no zone: UTC
		}
		res := runRequest(t, runs.Request{Spec: []byte(spec), SpecFile: t.Name() + ".yaml", TaskQueue: queue, Timezone: tz}, 2*time.Minute)
		wantStatus(t, res, runs.StatusSucceeded)
		out := node(t, res, "split").Outputs
		train, eval := out["train_rows"].(float64), out["eval_rows"].(float64)
		t.Logf("run in %s: trained on %.0f rows of 2026-11-02, held out %.0f of 2026-11-03 (split's timezone %v); by event time in %s: %d and %d",
			zone, train, eval, out["timezone"], zone, byDay[zone]["2026-11-02"], byDay[zone]["2026-11-03"])
		if out["timezone"] != zone {
			t.Errorf("split's timezone %v, want %s", out["timezone"], zone)
		}
		if int(train) != byDay[zone]["2026-11-02"] || int(eval) != byDay[zone]["2026-11-03"] {
			t.Errorf("run in %s: %.0f train and %.0f eval rows, want the zone's days' %d and %d", zone, train, eval, byDay[zone]["2026-11-02"], byDay[zone]["2026-11-03"])
		}
		got[zone] = [2]float64{train, eval}
	}
	if got["UTC"] == got["Europe/Berlin"] {
		t.Errorf("the same rows in both zones (%v): the demo's events do not straddle midnight", got["UTC"])
	}
}
