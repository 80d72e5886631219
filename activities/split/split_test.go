package split

import (
	"context"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// splitEnv is the reproduction in small: six days of training
// rows of which only the first four have features promoted into them.
type splitEnv struct {
	splits *Splits
	snap   string
}

func day(i int) string { return (demodata.DefaultStart + backfill.Day(i)).String() }

func newSplitEnv(t *testing.T) *splitEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	lz := lake.NewLazy(lake.Config{DataDir: dir}, quiet)
	t.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := demodata.Config{Rows: 3000, Days: 6, Seed: 3, Users: 200, Ads: 30}
	if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, nil); err != nil {
		t.Fatal(err)
	}
	st, err := features.Stage(ctx, cat, features.StageSpec{
		Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"},
		StartDate: day(0), EndDate: day(3), Alignment: "previous_day", Features: []string{"activity", "sessions"}, Prefix: "u_",
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := features.Promote(ctx, cat, features.PromoteSpec{
		Training: "ml.training", Staging: []string{st.Staging}, StartDate: day(0), EndDate: day(3),
	}, "p1", 2, quiet)
	if err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	return &splitEnv{splits: &Splits{Catalog: lz, Store: srv.Open(t, ""), Logger: quiet}, snap: strconv.FormatInt(pr.Snapshot, 10)}
}

func (e *splitEnv) run(t *testing.T, run string, with map[string]any) (map[string]any, error) {
	t.Helper()
	w := map[string]any{"table": "ml.training", "snapshot_id": e.snap, "dense": []any{"u_activity", "u_sessions"}, "sparse": []any{"user_id", "ad_id"}}
	for k, v := range with {
		w[k] = v
	}
	if err := checkSplit(w); err != nil {
		return nil, err
	}
	return nodetest.Run(t, e.splits.Run, nodetype.Input{Pipeline: "test", RunID: run, Node: "split", Type: "split", With: w}, nil)
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestSplitReadsOnlyTheRunsWindow(t *testing.T) {
	e := newSplitEnv(t)
	out, err := e.run(t, "r1", map[string]any{"start_date": day(0), "end_date": day(3), "eval_days": 1})
	if err != nil {
		t.Fatal(err)
	}
	// demodata writes Rows/Days rows a day.
	if out["train_rows"].(float64) != 1500 || out["eval_rows"].(float64) != 500 {
		t.Errorf("rows: train %v eval %v, want 1500 and 500", out["train_rows"], out["eval_rows"])
	}
	if got := strs(out["train_dates"]); strings.Join(got, ",") != day(0)+","+day(1)+","+day(2) {
		t.Errorf("train dates %v", got)
	}
	if got := strs(out["eval_dates"]); len(got) != 1 || got[0] != day(3) {
		t.Errorf("eval dates %v, want [%s] (the last date of the window, not of the table)", got, day(3))
	}
	if want := "window " + day(0) + ".." + day(3) + ": 1,500 train rows (" + day(0) + ".." + day(2) + "), 500 eval rows (" + day(3) + "); max null rate"; !strings.HasPrefix(out["summary"].(string), want) {
		t.Errorf("summary %q, want it to start %q", out["summary"], want)
	}
	win := out["window"].(map[string]any)
	if win["start"] != day(0) || win["end"] != day(3) {
		t.Errorf("window %v", win)
	}
	cov := out["coverage"].([]any)
	if len(cov) != 4 {
		t.Fatalf("coverage %v", cov)
	}
	for _, c := range cov {
		c := c.(map[string]any)
		// max_null_rate is absent from the block: its default applies.
		if c["max_null_rate"] != 0.5 || c["train_null_rate"].(float64) > 0.5 {
			t.Errorf("coverage %v", c)
		}
	}
	// label, date_column and request_id are absent too.
	if sch := out["schema"].(map[string]any); sch["label"] != "label" || sch["date"] != "date" || sch["request_id"] != "request_id" {
		t.Errorf("schema %v: want the default label, date and request_id columns", sch)
	}
	// The manifest records the same window, for train and evaluate.
	ref, err := Open(context.Background(), e.splits.Store, out["uri"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if ref.Record.Window.String() != day(0)+".."+day(3) || len(ref.Record.Coverage.Features) != 4 {
		t.Errorf("manifest outputs %+v", ref.Record)
	}
}

// TestSplitCoverageFailsOnMissingFeatures: the window reaches days the
// backfill never covered, so the held-out rows have no features at all.
// That used to train and gate silently; now the split fails, naming the
// feature, the rate and the limit, without retry.
func TestSplitCoverageFailsOnMissingFeatures(t *testing.T) {
	e := newSplitEnv(t)
	_, err := e.run(t, "r2", map[string]any{"start_date": day(0), "end_date": day(5), "eval_days": 1})
	if nodetest.ErrType(err) != errtype.CheckFailed {
		t.Fatalf("want %s, got %v", errtype.CheckFailed, err)
	}
	for _, want := range []string{
		"feature u_activity is null in 100.0% of the 500 held-out rows (" + day(5) + "), above max_null_rate 0.5",
		"feature u_sessions is null in 100.0% of the 500 held-out rows",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}
	// A per-feature override lets a known-sparse feature through; the
	// other one still fails.
	_, err = e.run(t, "r3", map[string]any{"start_date": day(0), "end_date": day(5), "max_null_rates": map[string]any{"u_activity": 1.0}})
	if nodetest.ErrType(err) != errtype.CheckFailed || strings.Contains(err.Error(), "u_activity") || !strings.Contains(err.Error(), "u_sessions") {
		t.Errorf("override: %v", err)
	}
	// Turned off, the split is written and says what it saw.
	out, err := e.run(t, "r4", map[string]any{"start_date": day(0), "end_date": day(5), "max_null_rate": 1.0})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range out["coverage"].([]any) {
		c := c.(map[string]any)
		if strings.HasPrefix(c["feature"].(string), "u_") && c["eval_null_rate"] != 1.0 {
			t.Errorf("coverage %v: want eval null rate 1", c)
		}
	}
}

// TestNullRateOverrides: rates are read by package number's rule and must
// lie in 0..1; null is refused rather than read as NaN.
func TestNullRateOverrides(t *testing.T) {
	got, err := nullRateOverrides(map[string]any{"a": "0.25", "b": 1, "c": 0.5})
	if err != nil || got["a"] != 0.25 || got["b"] != 1 || got["c"] != 0.5 {
		t.Fatalf("nullRateOverrides = %v, %v", got, err)
	}
	for v, msg := range map[any]string{nil: "a: want a rate, got null", "NaN": `a: "NaN" is not a finite number`, 1.5: "a: 1.5 is not between 0 and 1", "x": `a: want a number, got "x"`} {
		if _, err := nullRateOverrides(map[string]any{"a": v}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("nullRateOverrides(a: %#v) = %v, want an error containing %q", v, err, msg)
		}
	}
}

func TestSplitWindowErrors(t *testing.T) {
	e := newSplitEnv(t)
	for _, c := range []struct {
		name string
		with map[string]any
		want string
	}{
		{"no rows", map[string]any{"start_date": "2026-12-01", "end_date": "2026-12-05"},
			"table ml.training has no rows in the run's window 2026-12-01..2026-12-05"},
		{"eval_from outside", map[string]any{"start_date": day(0), "end_date": day(3), "eval_from": day(4)},
			"eval_from " + day(4) + " is outside the window " + day(0) + ".." + day(3)},
		{"one date", map[string]any{"start_date": day(2), "end_date": day(2)},
			"1 distinct date(s) with rows: a train/eval split needs at least 2"},
		{"reversed", map[string]any{"start_date": day(3), "end_date": day(0)}, "end_date"},
		{"bad override", map[string]any{"start_date": day(0), "end_date": day(3), "max_null_rates": map[string]any{"u_nope": 0.2}},
			"max_null_rates: u_nope is not a dense or sparse feature of the split"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.run(t, "bad", c.with)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	// eval_from outside the window is caught by validation, before a run.
	err := checkSplit(map[string]any{"start_date": day(0), "end_date": day(3), "eval_from": day(5), "dense": []any{"x"}})
	if err == nil || !strings.Contains(err.Error(), "is outside the window") {
		t.Errorf("validation: %v", err)
	}
	// Feature columns from a list param are only known at run time; an
	// empty literal list names none.
	for _, c := range []struct {
		with map[string]any
		ok   bool
	}{
		{map[string]any{"sparse": "${params.features}"}, true},
		{map[string]any{"dense": []any{}, "sparse": "${nodes.prep.outputs.columns}"}, true},
		{map[string]any{"dense": []any{}, "sparse": []any{}}, false},
		{map[string]any{}, false},
	} {
		w := map[string]any{"table": "ml.training", "start_date": day(0), "end_date": day(3)}
		maps.Copy(w, c.with)
		if err := checkSplit(w); (err == nil) != c.ok {
			t.Errorf("checkSplit %v: %v", c.with, err)
		}
	}
}

// TestSchema: the split's `with` fields, defaults and docs come from With,
// and its outputs from Outputs.
func TestSchema(t *testing.T) {
	typ := Type(Deps{})
	if err := typ.Validate(); err != nil {
		t.Fatal(err)
	}
	nt := typ.NodeType
	if nt.Name != "split" || SplitType.Name != "split" || nt.Check == nil {
		t.Fatalf("node type %+v", nt)
	}
	fields := map[string]dags.Field{}
	for _, f := range nt.Fields {
		if f.Doc == "" {
			t.Errorf("field %s has no doc", f.Name)
		}
		if strings.Contains(f.Doc, "default "+f.Default) && f.Default != "" {
			t.Errorf("field %s: the doc repeats the default: %q", f.Name, f.Doc)
		}
		fields[f.Name] = f
	}
	for _, want := range []dags.Field{
		{Name: "table", Type: dags.FieldString},
		{Name: "files", Type: dags.FieldAny},
		{Name: "snapshot_id", Type: dags.FieldAny},
		{Name: "start_date", Type: dags.FieldString, Required: true},
		{Name: "end_date", Type: dags.FieldString, Required: true},
		{Name: "dense", Type: dags.FieldStringList},
		{Name: "sparse", Type: dags.FieldStringList},
		{Name: "label", Type: dags.FieldString, Default: "label"},
		{Name: "date_column", Type: dags.FieldString, Default: "date"},
		{Name: "request_id", Type: dags.FieldString, Default: "request_id"},
		{Name: "slice", Type: dags.FieldString},
		{Name: "eval_days", Type: dags.FieldInt, Default: "1"},
		{Name: "eval_from", Type: dags.FieldString},
		{Name: "max_null_rate", Type: dags.FieldNumber, Default: "0.5"},
		{Name: "max_null_rates", Type: dags.FieldAny, Nested: []dags.Nested{{Path: "*", Type: dags.FieldNumber}}},
		{Name: "max_file_rows", Type: dags.FieldInt},
		{Name: "join", Type: dags.FieldAny},
		{Name: "bucket_groups", Type: dags.FieldInt},
		{Name: "timezone", Type: dags.FieldString},
	} {
		got := fields[want.Name]
		got.Doc = ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("field %s: %+v, want %+v", want.Name, got, want)
		}
	}
	if len(fields) != 19 {
		t.Errorf("%d fields, want 19", len(fields))
	}
	wantOut := "uri manifest train_rows eval_rows window train_dates eval_dates coverage snapshot_id schema fingerprint reused joined files timezone summary s3"
	if got := strings.Join(nt.Outputs, " "); got != wantOut {
		t.Errorf("outputs %s, want %s", got, wantOut)
	}
}

var quiet = nodetest.Quiet
