package lake

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

var quiet = nodetest.Quiet

// field is what a spec sees of a `with` field.
type field struct {
	name     string
	typ      dags.FieldType
	required bool
	def      string
}

// TestSchema: the field lists derived from the With structs are the ones
// specs were written against (names, types, required), with the defaults
// the docs used to state, a doc for every field, and the same outputs.
func TestSchema(t *testing.T) {
	S, L, I, N, A, B := dags.FieldString, dags.FieldStringList, dags.FieldInt, dags.FieldNumber, dags.FieldAny, dags.FieldBool
	want := map[string]struct {
		fields  []field
		outputs []string
	}{
		"stage_features": {[]field{
			{"training_table", S, true, ""}, {"feature_table", S, true, ""}, {"keys", L, true, ""},
			{"start_date", S, true, ""}, {"end_date", S, true, ""}, {"alignment", S, true, ""},
			{"features", L, false, ""}, {"prefix", S, false, ""}, {"staging_table", S, false, ""},
			{"date_column", S, false, "date"}, {"event_time_column", S, false, "event_ts"},
			{"feature_time_column", S, false, "ts"}, {"lookback_days", I, false, "7"},
		}, []string{"staging_table", "snapshot_id", "rows", "matched", "feature_columns", "location", "start_date", "end_date", "summary"}},
		"feature_stats": {[]field{
			{"table", S, true, ""}, {"snapshot_id", A, false, ""}, {"columns", L, false, ""},
			{"start_date", S, false, ""}, {"end_date", S, false, ""}, {"date_column", S, false, "date"},
			{"max_null_rate", N, false, ""}, {"min_distinct", I, false, ""}, {"min_std", N, false, ""},
		}, []string{"report_uri", "html_uri", "rows", "columns", "snapshot_id", "scope", "dates", "files", "summary"}},
		"promote_features": {[]field{
			{"training_table", S, true, ""}, {"staging_tables", L, true, ""}, {"start_date", S, true, ""},
			{"end_date", S, true, ""}, {"date_column", S, false, "date"}, {"bucket_groups", I, false, ""},
		}, []string{"previous_snapshot_id", "snapshot_id", "rows", "matched", "columns", "partitions", "files", "rounds", "summary", "queue", "already"}},
		"rollback_table": {[]field{{"table", S, true, ""}, {"to", A, true, ""}, {"snapshot", A, false, ""}},
			[]string{"table", "action", "promotion_snapshot_id", "from_snapshot_id", "to_snapshot_id", "files_removed", "files_restored",
				"files_kept", "partitions_kept", "ancestor", "schema_restored", "schema", "noop", "note", "summary"}},
		"maintain_table": {[]field{
			{"table", S, true, ""}, {"expire_older_than", S, false, "30d"}, {"keep_last", I, false, "10"},
			{"keep_snapshots", L, false, ""}, {"models", B, false, "true"}, {"remove_orphans", B, false, ""},
			{"orphan_margin", S, false, "3d"}, {"compact", B, false, ""}, {"dry_run", B, false, ""},
		}, []string{"table", "dry_run", "snapshots_before", "snapshots_after", "data_files_before", "data_files_after",
			"files_before", "files_after", "bytes_before", "bytes_after", "expired", "kept", "compacted_files", "compaction_files",
			"compaction_snapshot_id", "orphans_removed", "orphans_young", "summary"}},
	}
	types := Types(Deps{Logger: quiet})
	if len(types) != len(want) {
		t.Fatalf("%d types, want %d", len(types), len(want))
	}
	for _, typ := range types {
		if err := typ.Validate(); err != nil {
			t.Fatal(err)
		}
		nt := typ.NodeType
		w, ok := want[nt.Name]
		if !ok {
			t.Fatalf("unexpected type %s", nt.Name)
		}
		var got []field
		for _, f := range nt.Fields {
			got = append(got, field{f.Name, f.Type, f.Required, f.Default})
			if f.Doc == "" {
				t.Errorf("%s.%s has no doc", nt.Name, f.Name)
			}
		}
		if !slices.Equal(got, w.fields) {
			t.Errorf("%s fields\n got %v\nwant %v", nt.Name, got, w.fields)
		}
		if !slices.Equal(nt.Outputs, w.outputs) {
			t.Errorf("%s outputs %v, want %v", nt.Name, nt.Outputs, w.outputs)
		}
	}
	if nt := PromoteFeaturesType; nt.Kind != dags.KindWorkflow || nt.Target != PromoteWorkflow {
		t.Errorf("promote_features kind %q target %q", nt.Kind, nt.Target)
	}
	promote := Types(Deps{Logger: quiet})[2]
	if len(promote.Activities) != 4 || promote.Activities[PromotePlanActivity] == nil || promote.Activities[TableQueueEnqueueActivity] == nil ||
		promote.Activities[PromoteBucketsActivity] == nil || promote.Activities[PromoteCommitActivity] == nil {
		t.Errorf("promote_features activities %v", promote.Activities)
	}
	if FeatureStatsType.Name != "feature_stats" || len(StageFeaturesType.Fields) == 0 {
		t.Errorf("exported types: %+v", FeatureStatsType)
	}
}

// TestDefaults: a block without the optional keys decodes to the defaults
// the schema shows, and those reach the domain specs.
func TestDefaults(t *testing.T) {
	stage, err := nodetype.DecodeWith[StageWith](map[string]any{"training_table": "ml.t", "feature_table": "f.g"})
	if err != nil {
		t.Fatal(err)
	}
	if s := stage.spec(); s.DateColumn != "date" || s.EventTimeColumn != "event_ts" || s.FeatureTimeColumn != "ts" || s.LookbackDays != 7 || s.Staging != "" {
		t.Errorf("stage spec %+v", s)
	}
	stats, err := nodetype.DecodeWith[StatsWith](map[string]any{"table": "ml.t", "snapshot_id": float64(42)})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := stats.spec(); err != nil || s.DateColumn != "date" || s.SnapshotID != 42 || s.MaxNullRate != nil {
		t.Errorf("stats spec %+v, %v", s, err)
	}
	stats.SnapshotID = 1.5
	if _, err := stats.spec(); nodetest.ErrType(err) != errtype.BadInput {
		t.Errorf("snapshot_id 1.5: %v", err)
	}
	promote, err := nodetype.DecodeWith[PromoteWith](map[string]any{"training_table": "ml.t", "bucket_groups": 2})
	if err != nil {
		t.Fatal(err)
	}
	if s := promote.spec(); s.DateColumn != "date" || s.Groups != 2 || s.Training != "ml.t" {
		t.Errorf("promote spec %+v", s)
	}
}

func TestCheck(t *testing.T) {
	reg := nodetest.Registry(t, Types(Deps{Logger: quiet})...)
	for _, c := range []struct {
		typ  string
		with map[string]any
		ok   bool
	}{
		{"stage_features", map[string]any{"alignment": "as_of", "start_date": "2026-01-01", "end_date": "2026-01-02"}, true},
		{"stage_features", map[string]any{"alignment": "sometimes"}, false},
		{"stage_features", map[string]any{"start_date": "2026-01-02", "end_date": "2026-01-01"}, false},
		{"feature_stats", map[string]any{"snapshot_id": "123"}, true},
		{"feature_stats", map[string]any{"snapshot_id": "${nodes.stage.outputs.snapshot_id}"}, true},
		{"feature_stats", map[string]any{"snapshot_id": "abc"}, false},
		{"feature_stats", map[string]any{"max_null_rate": 1.5}, false},
		{"promote_features", map[string]any{"start_date": "2026-13-01"}, false},
		{"rollback_table", map[string]any{"to": float64(7)}, true},
		{"rollback_table", map[string]any{"to": 0.5}, false},
		{"rollback_table", map[string]any{"to": "7", "snapshot": "${nodes.promote.outputs.snapshot_id}"}, true},
		{"rollback_table", map[string]any{"to": "7", "snapshot": "x"}, false},
		{"maintain_table", map[string]any{"table": "ml.t", "compact": true}, true},
		{"maintain_table", map[string]any{"table": "ml.t", "expire_older_than": "3x"}, false},
		{"maintain_table", map[string]any{"table": "ml.t", "keep_last": -1}, false},
		{"maintain_table", map[string]any{"table": "ml.t", "expire_older_than": "off"}, false},
		{"maintain_table", map[string]any{"table": "ml.t", "expire_older_than": "${params.age}"}, true},
	} {
		typ, _ := reg.Lookup(c.typ)
		if err := typ.Check(c.with); (err == nil) != c.ok {
			t.Errorf("%s %v: error %v, want ok=%t", c.typ, c.with, err, c.ok)
		}
	}
}

func day(i int) string { return (demodata.DefaultStart + backfill.Day(i)).String() }

// TestNodes runs the lake's node types as the worker does, on a small lake:
// stage with the defaults, profile what was staged, promote it with the
// workflow and its real activities, and roll the promotion back.
func TestNodes(t *testing.T) {
	ctx := context.Background()
	lz := lake.NewLazy(lake.Config{DataDir: t.TempDir()}, quiet)
	t.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := demodata.Config{Rows: 600, Days: 3, Seed: 3, Users: 50, Ads: 10}
	if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, nil); err != nil {
		t.Fatal(err)
	}
	types := map[string]nodetype.Type{}
	for _, typ := range Types(Deps{Catalog: lz, Logger: quiet}) {
		types[typ.NodeType.Name] = typ
	}
	run := func(typ string, with map[string]any) (map[string]any, error) {
		return nodetest.Run(t, types[typ].Run, nodetype.Input{Pipeline: "p", RunID: "r", Node: typ, Type: typ, With: with}, nil)
	}

	stage, err := run("stage_features", map[string]any{
		"training_table": "ml.training", "feature_table": "features.user_daily", "keys": []any{"user_id"},
		"start_date": day(0), "end_date": day(1), "alignment": "previous_day", "features": []any{"activity"}, "prefix": "u_",
	})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := stage["snapshot_id"].(string)
	if _, err := strconv.ParseInt(snap, 10, 64); err != nil || stage["staging_table"] != backfill.StagingTableName("ml.training", "features.user_daily") ||
		stage["rows"] != float64(400) || stage["start_date"] != day(0) || stage["end_date"] != day(1) {
		t.Fatalf("stage outputs %v", stage)
	}

	stats, err := run("feature_stats", map[string]any{"table": stage["staging_table"], "snapshot_id": snap})
	if err != nil {
		t.Fatal(err)
	}
	if stats["snapshot_id"] != snap || stats["rows"] != float64(400) || stats["report_uri"] == "" || stats["summary"] == "" {
		t.Fatalf("stats outputs %v", stats)
	}
	if _, err := run("feature_stats", map[string]any{"table": stage["staging_table"], "snapshot_id": "x"}); nodetest.ErrType(err) != errtype.BadInput {
		t.Errorf("snapshot_id x: %v, want %s", err, errtype.BadInput)
	}

	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	promote := types["promote_features"]
	env.RegisterWorkflowWithOptions(promote.Workflow, workflow.RegisterOptions{Name: promote.TargetName()})
	for name, fn := range promote.Activities {
		if name != TableQueueEnqueueActivity {
			env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
		}
	}
	grantAtOnce(env)
	env.ExecuteWorkflow(PromoteWorkflow, nodetype.Input{Pipeline: "p", RunID: "r", Node: "promote", Type: "promote_features", With: map[string]any{
		"training_table": "ml.training", "staging_tables": []any{stage["staging_table"]}, "start_date": day(0), "end_date": day(1),
	}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	out := res.Outputs
	prev, _ := out["previous_snapshot_id"].(string)
	if _, err := strconv.ParseInt(prev, 10, 64); err != nil || out["snapshot_id"] == prev || out["rows"] != float64(400) ||
		out["rounds"] != float64(1) || !slices.Equal(anyStrings(out["columns"]), []string{"u_activity"}) {
		t.Fatalf("promote outputs %v", out)
	}

	// A spec without `snapshot`: this run's promotion is main's head, so
	// main moves back; run again, the same report.
	back, err := run("rollback_table", map[string]any{"table": "ml.training", "to": prev})
	if err != nil {
		t.Fatal(err)
	}
	if back["action"] != "moved_main" || back["to_snapshot_id"] != prev || back["from_snapshot_id"] != out["snapshot_id"] || back["noop"] != false ||
		back["ancestor"] != true || back["schema_restored"] != true || back["table"] != "ml.training" || back["promotion_snapshot_id"] != out["snapshot_id"] {
		t.Fatalf("rollback outputs %v", back)
	}
	again, err := run("rollback_table", map[string]any{"table": "ml.training", "to": prev})
	if err != nil || !maps.Equal(again, back) {
		t.Fatalf("second rollback: %v, %v; first %v", again, err, back)
	}
	if _, err := run("rollback_table", map[string]any{"table": "ml.training", "to": "nope"}); nodetest.ErrType(err) != errtype.BadInput {
		t.Errorf("to nope: %v, want %s", err, errtype.BadInput)
	}
}

func anyStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}
