package lake

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestRollbackSparesOtherRuns: run r1 promotes day 0, then run r2 day 1,
// into one table, and r1 fails. Its rollback without `snapshot` refuses
// to move main (that would undo r2); with it, a new snapshot takes r1's
// files out and day 1 reads exactly as r2 left it. Run again, the
// rollback reports the same and changes nothing.
func TestRollbackSparesOtherRuns(t *testing.T) {
	ctx := context.Background()
	lz := lake.NewLazy(lake.Config{DataDir: t.TempDir()}, quiet)
	t.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := demodata.Config{Rows: 600, Days: 3, Seed: 5, Users: 50, Ads: 10}
	if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, nil); err != nil {
		t.Fatal(err)
	}
	spec := features.StageSpec{Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"}, Alignment: "previous_day",
		Prefix: "u_", Staging: "ml.s_user", StartDate: day(0), EndDate: day(2)}
	if _, err := features.Stage(ctx, cat, spec, quiet); err != nil {
		t.Fatal(err)
	}
	types := map[string]nodetype.Type{}
	for _, typ := range Types(Deps{Catalog: lz, Logger: quiet}) {
		types[typ.NodeType.Name] = typ
	}
	rollback := func(run string, with map[string]any) (map[string]any, error) {
		with["table"] = "ml.training"
		return nodetest.Run(t, types["rollback_table"].Run, nodetype.Input{Pipeline: "p", RunID: run, Node: "rollback", Type: "rollback_table", With: with}, nil)
	}
	daySum := func(i int) lake.Checksum {
		t.Helper()
		tbl, err := cat.Load(ctx, "ml.training")
		if err != nil {
			t.Fatal(err)
		}
		d := int32(demodata.DefaultStart) + int32(i)
		sum, err := lake.TableChecksum(ctx, tbl, table.WithRowFilter(lake.DateRange("date", d, d)))
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	head := func() string {
		tbl, err := cat.Load(ctx, "ml.training")
		if err != nil {
			t.Fatal(err)
		}
		return lakeID(tbl.CurrentSnapshot().SnapshotID)
	}

	p1 := promoteRun(t, types["promote_features"], "r1", day(0))
	p2 := promoteRun(t, types["promote_features"], "r2", day(1))
	if p2["previous_snapshot_id"] != p1["snapshot_id"] {
		t.Fatalf("r2 did not promote on r1: %v after %v", p2, p1)
	}
	day1, headBefore := daySum(1), head()

	// The old form: r1's promotion is found, but main moved on.
	_, err = rollback("r1", map[string]any{"to": p1["previous_snapshot_id"]})
	if nodetest.ErrType(err) != errtype.ConcurrentMove || !strings.Contains(err.Error(), "would undo them too") || !strings.Contains(err.Error(), "snapshot: ${nodes.") {
		t.Fatalf("rollback without snapshot: %v", err)
	}
	// A run with no promotion on that snapshot.
	if _, err = rollback("r3", map[string]any{"to": p1["previous_snapshot_id"]}); nodetest.ErrType(err) != errtype.ConcurrentMove ||
		!strings.Contains(err.Error(), "no snapshot on") {
		t.Fatalf("rollback of a run that promoted nothing: %v", err)
	}
	// Ids that are not one commit.
	if _, err = rollback("r1", map[string]any{"to": p1["previous_snapshot_id"], "snapshot": p2["snapshot_id"]}); nodetest.ErrType(err) != errtype.BadInput {
		t.Fatalf("mismatched ids: %v", err)
	}
	if h := head(); h != headBefore {
		t.Fatalf("a refused rollback moved main: %s, was %s", h, headBefore)
	}

	back, err := rollback("r1", map[string]any{"to": p1["previous_snapshot_id"], "snapshot": p1["snapshot_id"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rollback: %v", back["summary"])
	if back["action"] != "reverted" || back["from_snapshot_id"] != p2["snapshot_id"] || back["to_snapshot_id"] == p2["snapshot_id"] ||
		back["files_removed"] != p1["files"] || back["files_restored"].(float64) == 0 || back["schema_restored"] != false ||
		!strings.HasPrefix(back["schema"].(string), "kept: ") || back["noop"] != false || back["promotion_snapshot_id"] != p1["snapshot_id"] ||
		!strings.Contains(back["summary"].(string), "files removed") {
		t.Fatalf("rollback outputs %v (promotion %v)", back, p1)
	}
	if got := daySum(1); got.Digest != day1.Digest || got.Rows != day1.Rows {
		t.Errorf("day 1 (r2's) changed: %+v, was %+v", got, day1)
	}
	again, err := rollback("r1", map[string]any{"to": p1["previous_snapshot_id"], "snapshot": p1["snapshot_id"]})
	if err != nil || !reflect.DeepEqual(again, back) {
		t.Fatalf("second rollback %v, %v; first %v", again, err, back)
	}

	// A promotion that changed nothing has nothing to roll back.
	none, err := rollback("r2", map[string]any{"to": p2["snapshot_id"], "snapshot": p2["snapshot_id"]})
	if err != nil || none["action"] != "nothing" || none["noop"] != true || !strings.Contains(none["summary"].(string), "changed nothing") {
		t.Fatalf("rollback of a no-op promotion: %v, %v", none, err)
	}
}

// promoteRun runs a promote_features node of run into ml.training for one
// day, with the workflow and its real activities, and returns its outputs.
func promoteRun(t *testing.T, promote nodetype.Type, run, date string) map[string]any {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(promote.Workflow, workflow.RegisterOptions{Name: promote.TargetName()})
	for name, fn := range promote.Activities {
		if name != TableQueueEnqueueActivity {
			env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
		}
	}
	grantAtOnce(env)
	env.ExecuteWorkflow(PromoteWorkflow, nodetype.Input{Pipeline: "p", RunID: run, Node: "promote", Type: "promote_features", With: map[string]any{
		"training_table": "ml.training", "staging_tables": []any{"ml.s_user"}, "start_date": date, "end_date": date,
	}})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res.Outputs
}

func lakeID(id int64) string { return strconv.FormatInt(id, 10) }
