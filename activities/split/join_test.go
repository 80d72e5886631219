package split

import (
	"context"
	"iter"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/noop"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// joinEnv is a lake with demo data and two staged feature groups that are
// not promoted: the user features cover days 1..4 only, so day 0's rows
// have no staged row and must come out null.
type joinEnv struct {
	splits      *Splits
	cat         *lake.Catalog
	base        int64 // the training table's snapshot, before any promotion
	user, ad    features.StageResult
	dense       []any
	sparse      []any
	first, last int
	windowStart string
	windowEnd   string
}

func newJoinEnv(t *testing.T) *joinEnv {
	t.Helper()
	ctx := context.Background()
	lz := lake.NewLazy(lake.Config{DataDir: t.TempDir()}, quiet)
	t.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := demodata.Config{Rows: 4000, Days: 5, Seed: 5, Users: 200, Ads: 30}
	if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, nil); err != nil {
		t.Fatal(err)
	}
	e := &joinEnv{cat: cat, first: 0, last: 4,
		dense:  []any{"u_activity", "u_sessions", "ad_quality"},
		sparse: []any{"user_id", "ad_id", "u_recent_ads"}}
	e.windowStart, e.windowEnd = day(e.first), day(e.last)
	tbl, err := cat.Load(ctx, "ml.training")
	if err != nil {
		t.Fatal(err)
	}
	e.base = tbl.CurrentSnapshot().SnapshotID
	stage := func(feature, prefix string, keys, cols []string, from int) features.StageResult {
		res, err := features.Stage(ctx, cat, features.StageSpec{
			Training: "ml.training", Feature: feature, Keys: keys, StartDate: day(from), EndDate: day(e.last),
			Alignment: "previous_day", Features: cols, Prefix: prefix,
		}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	e.user = stage("features.user_daily", "u_", []string{"user_id"}, []string{"activity", "sessions", "recent_ads"}, 1)
	e.ad = stage("features.ad_daily", "", []string{"ad_id"}, []string{"ad_quality", "ad_ctr_7d"}, 0)
	srv := s3test.Start(t)
	e.splits = &Splits{Catalog: lz, Store: srv.Open(t, ""), Logger: quiet}
	return e
}

func (e *joinEnv) run(t *testing.T, runID string, snap int64, join []any, with map[string]any) (map[string]any, error) {
	t.Helper()
	w := map[string]any{"table": "ml.training", "snapshot_id": strconv.FormatInt(snap, 10), "start_date": e.windowStart, "end_date": e.windowEnd,
		"dense": e.dense, "sparse": e.sparse, "max_null_rate": 1.0}
	if join != nil {
		w["join"] = join
	}
	for k, v := range with {
		w[k] = v
	}
	if err := checkSplit(w); err != nil {
		return nil, err
	}
	return nodetest.Run(t, e.splits.Run, nodetype.Input{Pipeline: "test", RunID: runID, Node: "split", Type: "split", With: w}, nil)
}

// promote promotes both staging tables into the training table over the
// window and returns the new snapshot.
func (e *joinEnv) promote(t *testing.T) int64 {
	t.Helper()
	pr, err := features.Promote(context.Background(), e.cat, features.PromoteSpec{
		Training: "ml.training", Staging: []string{e.user.Staging, e.ad.Staging}, StartDate: e.windowStart, EndDate: e.windowEnd,
	}, "p", 2, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return pr.Snapshot
}

// entry is a join entry for a staging table at its snapshot.
func entry(table string, snap int64, more map[string]any) map[string]any {
	m := map[string]any{"table": table, "snapshot_id": strconv.FormatInt(snap, 10)}
	for k, v := range more {
		m[k] = v
	}
	return m
}

func (e *joinEnv) sums(t *testing.T, out map[string]any) [2]Checksum {
	t.Helper()
	var s [2]Checksum
	for i, name := range []string{TrainDataset, EvalDataset} {
		c, err := DatasetChecksum(context.Background(), e.splits.Store, out["uri"].(string), name)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = c
	}
	return s
}

// TestSplitJoinMatchesPromotion: a split that joins the two staging tables
// gives exactly the rows and values of the split of the same window after
// promoting them, including day 0's rows, which have no staged user
// features (nulls); and the training table is never written.
func TestSplitJoinMatchesPromotion(t *testing.T) {
	e := newJoinEnv(t)
	ctx := context.Background()
	join := []any{entry(e.user.Staging, e.user.SnapshotID, nil), entry(e.ad.Staging, e.ad.SnapshotID, map[string]any{"columns": []any{"ad_quality"}})}
	joined, err := e.run(t, "join", e.base, join, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tbl, _ := e.cat.Load(ctx, "ml.training"); tbl.CurrentSnapshot().SnapshotID != e.base {
		t.Fatal("the split with join moved the training table")
	}
	promoted, err := e.run(t, "promoted", e.promote(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, ps := e.sums(t, joined), e.sums(t, promoted)
	if js != ps || js[0].Rows == 0 || js[1].Rows == 0 {
		t.Errorf("checksums (train, eval): joined %v, promoted %v", js, ps)
	}
	for _, k := range []string{"train_rows", "eval_rows", "train_dates", "eval_dates", "coverage", "schema"} {
		if !reflect.DeepEqual(joined[k], promoted[k]) {
			t.Errorf("%s: joined %v, promoted %v", k, joined[k], promoted[k])
		}
	}
	// Day 0 has no staged user features: their null rate shows it.
	for _, c := range joined["coverage"].([]any) {
		c := c.(map[string]any)
		if c["feature"] == "u_activity" && c["train_null_rate"].(float64) < 0.2 {
			t.Errorf("coverage %v: want day 0's rows null", c)
		}
	}
	// The record says which column came from which table and snapshot.
	var got []string
	for _, c := range joined["joined"].([]any) {
		c := c.(map[string]any)
		got = append(got, c["name"].(string)+"<-"+c["table"].(string)+"@"+c["snapshot_id"].(string))
	}
	u, a := "@"+strconv.FormatInt(e.user.SnapshotID, 10), "@"+strconv.FormatInt(e.ad.SnapshotID, 10)
	want := []string{"u_activity<-" + e.user.Staging + u, "u_sessions<-" + e.user.Staging + u, "u_recent_ads<-" + e.user.Staging + u, "ad_quality<-" + e.ad.Staging + a}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("joined %v, want %v", got, want)
	}
	if s := joined["summary"].(string); !strings.Contains(s, "bucket join (16 buckets)") {
		t.Errorf("summary %q", s)
	}
	ref, err := Open(ctx, e.splits.Store, joined["uri"].(string))
	if err != nil || len(ref.Record.Joined) != 4 {
		t.Errorf("manifest record: %+v, %v", ref.Record.Joined, err)
	}
}

// TestSplitJoinBucketCounts: copies of the staging tables with 4 buckets
// (dividing 16), 5 buckets (not: the fallback hash join) and a renamed key
// give the same rows as the staging table as stage_features wrote it.
func TestSplitJoinBucketCounts(t *testing.T) {
	e := newJoinEnv(t)
	e.dense, e.sparse = []any{"u_activity", "u_sessions"}, []any{"user_id", "u_recent_ads"}
	ref, err := e.run(t, "ref", e.base, []any{entry(e.user.Staging, e.user.SnapshotID, nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := e.sums(t, ref)
	for _, c := range []struct {
		name    string
		buckets int
		rename  map[string]string
		keys    map[string]any
		summary string
	}{
		{"4 buckets", 4, nil, nil, "bucket join (16 vs 4 buckets)"},
		{"32 buckets", 32, nil, nil, "bucket join (16 vs 32 buckets)"},
		{"5 buckets", 5, nil, nil, "fallback hash join by date (16 vs 5 buckets"},
		{"renamed key", 16, map[string]string{"request_id": "requestId", "user_id": "userId"},
			map[string]any{"request_id": "requestId", "user_id": "userId"}, "bucket join (16 buckets)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "ml.copy_" + strings.ReplaceAll(c.name, " ", "_")
			snap := copyStaging(t, e.cat, e.user.Staging, name, c.buckets, c.rename)
			more := map[string]any{}
			if c.keys != nil {
				more["keys"] = c.keys
			}
			out, err := e.run(t, name, e.base, []any{entry(name, snap, more)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.sums(t, out); got != want {
				t.Errorf("checksums %v, want %v", got, want)
			}
			if s := out["summary"].(string); !strings.Contains(s, c.summary) {
				t.Errorf("summary %q lacks %q", s, c.summary)
			}
		})
	}
}

// TestSplitJoinBadInput: what cannot be joined fails as BadInput, naming
// the table and column, before anything is written.
func TestSplitJoinBadInput(t *testing.T) {
	e := newJoinEnv(t)
	renamed := copyStaging(t, e.cat, e.user.Staging, "ml.renamed", 16, map[string]string{"request_id": "requestId"})
	byDate := copyStaging(t, e.cat, e.user.Staging, "ml.by_date", 0, nil)
	us := e.user.SnapshotID
	for _, c := range []struct {
		name string
		join []any
		want string
	}{
		{"missing table", []any{entry("ml.nope", 0, nil)}, "staging table ml.nope does not exist"},
		{"missing snapshot", []any{entry(e.user.Staging, 42, nil)}, "staging table " + e.user.Staging + " has no snapshot 42"},
		{"missing key", []any{entry("ml.renamed", renamed, nil)}, "staging table ml.renamed has no column request_id, the training table's request_id (if it names it otherwise, map it: keys: {request_id: NAME})"},
		{"type mismatch", []any{entry(e.user.Staging, us, map[string]any{"keys": map[string]any{"request_id": "u_activity"}})},
			"column u_activity is double in staging table " + e.user.Staging + " but request_id (long) in training table ml.training"},
		{"partition spec", []any{entry("ml.by_date", byDate, nil)}, "staging table ml.by_date is partitioned by identity(date) but training table ml.training by identity(date), bucket[16](user_id)"},
		{"unknown column", []any{entry(e.user.Staging, us, map[string]any{"columns": []any{"u_nope"}})}, "staging table " + e.user.Staging + " has no column u_nope"},
		{"name clash", []any{entry(e.user.Staging, us, nil), entry("ml.renamed", renamed, map[string]any{"keys": map[string]any{"request_id": "requestId"}})},
			"column u_activity of staging table ml.renamed would be u_activity, which staging table " + e.user.Staging + " has already: give a prefix"},
		{"label clash", []any{entry(e.user.Staging, us, map[string]any{"keys": map[string]any{"label": "x"}})}, "keys maps label, which is not a key or partition column"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.run(t, "bad", e.base, c.join, nil)
			if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (%s), want BadInput with %q", err, nodetest.ErrType(err), c.want)
			}
		})
	}
	if err := checkSplit(map[string]any{"start_date": day(0), "end_date": day(3), "dense": []any{"x"}, "join": []any{map[string]any{"table": "a", "key": "x"}}}); err == nil ||
		!strings.Contains(err.Error(), `join[0]: unknown key "key"`) {
		t.Errorf("validation: %v", err)
	}
}

// copyStaging copies a staging table into a new one partitioned by date
// and bucket(buckets, user_id) (by date alone when buckets is 0), with
// columns renamed, and returns its snapshot.
func copyStaging(t *testing.T, cat *lake.Catalog, src, dst string, buckets int, rename map[string]string) int64 {
	t.Helper()
	ctx := context.Background()
	from, err := cat.Load(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	var fields []iceberg.NestedField
	for _, f := range from.Schema().Fields() {
		if n, ok := rename[f.Name]; ok {
			f.Name = n
		}
		fields = append(fields, f)
	}
	schema := iceberg.NewSchemaWithIdentifiers(0, from.Schema().IdentifierFieldIDs, fields...)
	id := func(name string) int {
		if n, ok := rename[name]; ok {
			name = n
		}
		f, _ := schema.FindFieldByName(name)
		return f.ID
	}
	pfields := []iceberg.PartitionField{{SourceIDs: []int{id("date")}, FieldID: 1000, Name: "date", Transform: iceberg.IdentityTransform{}}}
	if buckets > 0 {
		pfields = append(pfields, iceberg.PartitionField{SourceIDs: []int{id("user_id")}, FieldID: 1001, Name: "user_bucket", Transform: iceberg.BucketTransform{NumBuckets: buckets}})
	}
	spec := iceberg.NewPartitionSpec(pfields...)
	to, err := cat.CreateTable(ctx, dst, schema, lake.TableSpec{Partition: &spec})
	if err != nil {
		t.Fatal(err)
	}
	out, err := table.SchemaToArrowSchema(to.Schema(), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	_, recs, err := from.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renamed := func(yield func(arrow.RecordBatch, error) bool) {
		for rec, err := range recs {
			if err != nil {
				yield(nil, err)
				return
			}
			cols := make([]arrow.Array, len(out.Fields()))
			for i := range cols {
				cols[i] = rec.Column(i)
			}
			r := array.NewRecordBatch(out, cols, rec.NumRows())
			rec.Release()
			if !yield(r, nil) {
				return
			}
		}
	}
	files, err := lake.WriteFiles(ctx, to, out, iter.Seq2[arrow.RecordBatch, error](renamed))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.AddFiles(ctx, dst, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tbl.CurrentSnapshot().SnapshotID
}

// TestSplitJoinValidatedWithTheSpec: the join list of the docs validates
// with references in it, and a malformed one is refused at validation.
func TestSplitJoinValidatedWithTheSpec(t *testing.T) {
	compile := func(join string) error {
		spec := `name: j
params:
  start_date: {type: string, default: "2026-11-01"}
  end_date: {type: string, default: "2026-11-04"}
nodes:
  - id: stage_user
    type: noop
  - id: split_candidate
    type: split
    needs: [stage_user]
    with:
      table: ml.training
      start_date: ${params.start_date}
      end_date: ${params.end_date}
      dense: [u_activity, u_ctr_7d, ad_quality]
      sparse: [user_id, ad_id]
      join:` + join
		s, err := dags.Parse("j.yaml", []byte(spec))
		if err != nil {
			return err
		}
		_, err = dags.Compile(s, nodetest.Registry(t, Type(Deps{}), noop.Type()), nil)
		return err
	}
	if err := compile(`
        - table: ${nodes.stage_user.outputs.staging_table}
          snapshot_id: ${nodes.stage_user.outputs.snapshot_id}
          columns: [u_activity, u_ctr_7d]
        - table: ml.ad_features_v2
          keys: {request_id: requestId}
          prefix: v2_`); err != nil {
		t.Errorf("the docs' join: %v", err)
	}
	for join, want := range map[string]string{
		` {table: ml.x}`:                            "join: want a list",
		"\n        - {table: ml.x, keys: [a]}":      "keys: want a map",
		"\n        - {snapshot_id: 3}":              "join[0]: give the staging table",
		"\n        - {table: ml.x, snapshot_id: x}": `join[0]: snapshot_id: "x" is not a snapshot id`,
	} {
		if err := compile(join); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("join %s: got %v, want %q", join, err, want)
		}
	}
}
