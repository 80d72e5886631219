package features_test

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/colstats"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// env is a lake in a temp dir with small demo tables.
type env struct {
	cat *lake.Catalog
	dir string
	cfg demodata.Config
}

func newEnv(t testing.TB, rows int64, days int) *env {
	t.Helper()
	dir := t.TempDir()
	cat, err := lake.Open(context.Background(), lake.Config{DataDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	cfg := demodata.Config{Rows: rows, Days: days, Seed: 11, Users: 300, Ads: 40}
	if _, err := demodata.Write(context.Background(), cat, cfg, demodata.DefaultTables, false, nil); err != nil {
		t.Fatal(err)
	}
	return &env{cat: cat, dir: dir, cfg: cfg}
}

func (e *env) day(i int) string { return (demodata.DefaultStart + backfill.Day(i)).String() }

// dataFiles counts the Parquet data files under the warehouse.
func (e *env) dataFiles(t *testing.T) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(e.dir, "warehouse"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			n++
		}
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return n
}

// rowsOf reads named columns of a table into maps keyed by the int64
// column key.
func rowsOf(t *testing.T, cat *lake.Catalog, name, key string, cols ...string) map[int64][]any {
	t.Helper()
	tbl, err := cat.Load(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]any{}
	_, recs, err := tbl.Scan(table.WithSelectedFields(append([]string{key}, cols...)...)).ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		keys := rec.Column(rec.Schema().FieldIndices(key)[0]).(*array.Int64)
		for i := range int(rec.NumRows()) {
			var vals []any
			for _, c := range cols {
				vals = append(vals, value(rec.Column(rec.Schema().FieldIndices(c)[0]), i))
			}
			if _, dup := out[keys.Value(i)]; dup {
				t.Fatalf("%s: duplicate %s %d", name, key, keys.Value(i))
			}
			out[keys.Value(i)] = vals
		}
		rec.Release()
	}
	return out
}

func value(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.Int64:
		return a.Value(i)
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Float64:
		return a.Value(i)
	case *array.Date32:
		return int64(a.Value(i))
	case *array.Timestamp:
		return int64(a.Value(i))
	default:
		return a.ValueStr(i)
	}
}

type featKey struct {
	user int64
	day  int64
}

// expectedStage is the reference join of user_daily's ctr_7d onto the
// training rows of days [from, to]: nested loops over plain maps.
func expectedStage(t *testing.T, cat *lake.Catalog, align backfill.Alignment, from, to int64) map[int64]any {
	train := rowsOf(t, cat, "ml.training", "request_id", "user_id", "date", "event_ts")
	type frow struct {
		user, day, ts int64
		ctr           any
	}
	var feats []frow
	tbl, _ := cat.Load(context.Background(), "features.user_daily")
	_, recs, err := tbl.Scan().ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		col := func(n string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(n)[0]) }
		for i := range int(rec.NumRows()) {
			feats = append(feats, frow{value(col("user_id"), i).(int64), value(col("date"), i).(int64), value(col("ts"), i).(int64), value(col("ctr_7d"), i)})
		}
		rec.Release()
	}
	want := map[int64]any{}
	for id, r := range train {
		user, day, ev := r[0].(int64), r[1].(int64), r[2].(int64)
		if day < from || day > to {
			continue
		}
		var got any
		bestTS := int64(math.MinInt64)
		for _, f := range feats {
			if f.user != user {
				continue
			}
			switch align {
			case backfill.SameDay:
				if f.day == day {
					got = f.ctr
				}
			case backfill.PreviousDay:
				if f.day == day-1 {
					got = f.ctr
				}
			case backfill.AsOf:
				if f.ts <= ev && f.ts > bestTS {
					bestTS, got = f.ts, f.ctr
				}
			}
		}
		want[id] = got
	}
	return want
}

// TestStageMatchesReference stages one feature for a date range under each
// alignment and compares every staged row with the reference join.
func TestStageMatchesReference(t *testing.T) {
	e := newEnv(t, 2000, 4)
	ctx := context.Background()
	for _, align := range backfill.Alignments {
		t.Run(string(align), func(t *testing.T) {
			res, err := features.Stage(ctx, e.cat, features.StageSpec{
				Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"},
				StartDate: e.day(1), EndDate: e.day(2), Alignment: string(align),
				Features: []string{"ctr_7d"}, Prefix: "u_", Staging: "ml.stage_" + string(align),
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			from, to := int64(demodata.DefaultStart+1), int64(demodata.DefaultStart+2)
			want := expectedStage(t, e.cat, align, from, to)
			got := rowsOf(t, e.cat, res.Staging, "request_id", "u_ctr_7d")
			if len(got) != len(want) || int64(len(got)) != res.Rows {
				t.Fatalf("staged %d rows (reported %d), want %d", len(got), res.Rows, len(want))
			}
			matched := 0
			for id, w := range want {
				g, ok := got[id]
				if !ok {
					t.Fatalf("request %d not staged", id)
				}
				if g[0] != w {
					t.Fatalf("request %d: staged %v, reference %v", id, g[0], w)
				}
				if w != nil {
					matched++
				}
			}
			if int64(matched) != res.Matched || matched == 0 {
				t.Errorf("matched %d, reported %d", matched, res.Matched)
			}
		})
	}
}

// TestStatsThresholds profiles a staging table, then fails a threshold on
// a deliberately broken feature, naming the column and its null rate.
func TestStatsThresholds(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{DataDir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	cfg := demodata.Config{Rows: 1500, Days: 2, Seed: 5, Users: 200, Ads: 30, Broken: demodata.Broken{Feature: "sessions", Mode: "nulls"}}
	if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, nil); err != nil {
		t.Fatal(err)
	}
	st, err := features.Stage(ctx, cat, features.StageSpec{
		Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"},
		StartDate: demodata.DefaultStart.String(), EndDate: (demodata.DefaultStart + 1).String(), Alignment: "as_of",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := features.Stats(ctx, cat, features.StatsSpec{Table: st.Staging}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1500 || len(res.Columns) != 6 {
		t.Errorf("stats %+v", res)
	}
	for _, uri := range []string{res.ReportURI, res.HTMLURI} {
		if _, err := os.Stat(strings.TrimPrefix(uri, "file://")); err != nil {
			t.Errorf("report %s: %v", uri, err)
		}
	}
	limit := 0.05
	_, err = features.Stats(ctx, cat, features.StatsSpec{Table: st.Staging, Thresholds: colstatsThresholds(limit)}, nil)
	if !features.IsCheckFailed(err) || !strings.Contains(err.Error(), "column sessions: null rate 1.0000 exceeds max_null_rate 0.0500") {
		t.Errorf("threshold: %v", err)
	}
}

func colstatsThresholds(maxNull float64) colstats.Thresholds {
	return colstats.Thresholds{MaxNullRate: &maxNull}
}

// TestStatsProfilesOnlyWhatTheSnapshotAdded is the diluted-null-rate bug:
// a staging table keeps the partitions of earlier runs, so profiling the
// whole table hid a feature that was 100% null in this run's dates. With
// the stage's snapshot the profile reads only the files it added, and says
// which dates those are.
func TestStatsProfilesOnlyWhatTheSnapshotAdded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2000, 4)
	stage := func(from, to int) features.StageResult {
		t.Helper()
		st, err := features.Stage(ctx, e.cat, features.StageSpec{
			Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"},
			StartDate: e.day(from), EndDate: e.day(to), Alignment: "previous_day",
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// An earlier run staged days 0-1 from good data.
	first := stage(0, 1)
	// Then the feature pipeline broke: sessions is null everywhere.
	cfg := e.cfg
	cfg.Broken = demodata.Broken{Feature: "sessions", Mode: "nulls"}
	if _, err := demodata.Write(ctx, e.cat, cfg, demodata.DefaultTables, true, nil); err != nil {
		t.Fatal(err)
	}
	second := stage(2, 3)

	limit := 0.5
	whole, err := features.Stats(ctx, e.cat, features.StatsSpec{Table: second.Staging}, nil)
	if err != nil {
		t.Fatalf("whole table: %v", err)
	}
	if !strings.HasPrefix(whole.Scope, "the whole table") || len(whole.Dates) != 4 {
		t.Errorf("whole-table scope %q, dates %v", whole.Scope, whole.Dates)
	}
	res, err := features.Stats(ctx, e.cat, features.StatsSpec{
		Table: second.Staging, SnapshotID: second.SnapshotID, Thresholds: colstatsThresholds(limit),
	}, nil)
	if !features.IsCheckFailed(err) || !strings.Contains(err.Error(), "column sessions: null rate 1.0000 exceeds max_null_rate 0.5000") {
		t.Fatalf("this run's snapshot: want sessions at 100%% null, got %v", err)
	}
	if want := []string{e.day(2), e.day(3)}; !slices.Equal(res.Dates, want) {
		t.Errorf("dates profiled %v, want %v", res.Dates, want)
	}
	if res.Rows != second.Rows || res.Rows >= whole.Rows {
		t.Errorf("rows profiled %d, staged %d, whole table %d", res.Rows, second.Rows, whole.Rows)
	}
	if !strings.Contains(res.Scope, fmt.Sprintf("files added by snapshot %d", second.SnapshotID)) || res.Files == 0 {
		t.Errorf("scope %q, files %d", res.Scope, res.Files)
	}
	// The first run's snapshot, read later, is still what it added then.
	old, err := features.Stats(ctx, e.cat, features.StatsSpec{Table: first.Staging, SnapshotID: first.SnapshotID}, nil)
	if err != nil {
		t.Fatalf("first run's snapshot: %v", err)
	}
	if want := []string{e.day(0), e.day(1)}; !slices.Equal(old.Dates, want) || old.Rows != first.Rows {
		t.Errorf("first snapshot: dates %v rows %d, want %v and %d", old.Dates, old.Rows, want, first.Rows)
	}
	if _, err := features.Stats(ctx, e.cat, features.StatsSpec{Table: second.Staging, SnapshotID: 42}, nil); !features.IsBadInput(err) {
		t.Errorf("unknown snapshot: %v", err)
	}
}

// TestDemoAlignmentsDiffer: the demo's feature rows are published at
// varied times of the next morning, so an impression before its user's
// row of the day before is out sees an older one as of its time. On
// rows stamped at midnight as_of and previous_day gave identical rows,
// and no test could tell the alignments apart.
func TestDemoAlignmentsDiffer(t *testing.T) {
	e := newEnv(t, 3000, 4)
	ctx := context.Background()
	staged := map[backfill.Alignment]map[int64][]any{}
	for _, align := range []backfill.Alignment{backfill.AsOf, backfill.PreviousDay} {
		res, err := features.Stage(ctx, e.cat, features.StageSpec{
			Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"},
			StartDate: e.day(2), EndDate: e.day(3), Alignment: string(align),
			Features: []string{"ctr_7d"}, Prefix: "u_", Staging: "ml.differ_" + string(align),
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		staged[align] = rowsOf(t, e.cat, res.Staging, "request_id", "u_ctr_7d")
	}
	same, differ := 0, 0
	for id, v := range staged[backfill.PreviousDay] {
		if fmt.Sprint(staged[backfill.AsOf][id]) == fmt.Sprint(v) {
			same++
		} else {
			differ++
		}
	}
	t.Logf("as_of vs previous_day: %d rows equal, %d differ", same, differ)
	// Rows are published within the first 12 hours of the next day:
	// roughly a quarter of the impressions come before their row.
	if differ == 0 || same == 0 || differ > same {
		t.Errorf("as_of and previous_day: %d rows equal, %d differ; want some of each, most equal", same, differ)
	}
}
