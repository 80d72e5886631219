package split

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/nodetype"
)

// filesEnv is a split of files with no lake: demo click logs and two
// feature groups as Parquet in Hive date folders (demodata.WriteFiles),
// none of whose files has a date column.
type filesEnv struct {
	splits *Splits
	dir    string
	res    demodata.FilesResult
}

func newFilesEnv(t *testing.T, cfg demodata.Config) *filesEnv {
	t.Helper()
	dir := t.TempDir()
	res, err := demodata.WriteFiles(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	return &filesEnv{dir: dir, res: res,
		splits: &Splits{Store: srv.Open(t, ""), Logger: quiet, Env: progenv.Policy{AllowPaths: []string{dir}}}}
}

func (e *filesEnv) run(t *testing.T, run string, with map[string]any, tz string) (map[string]any, error) {
	t.Helper()
	w := map[string]any{"files": filepath.Join(e.dir, demodata.ClicksFolder) + "/", "sparse": []any{"user_id", "ad_id"}, "max_null_rate": 1.0}
	maps.Copy(w, with)
	if err := checkSplit(w); err != nil {
		return nil, err
	}
	return nodetest.Run(t, e.splits.Run, nodetype.Input{Pipeline: "test", RunID: run, Node: "split", Type: "split", With: w, Timezone: tz}, nil)
}

// signals is a join of the demo's user_signals folder.
func (e *filesEnv) signals(align string, more map[string]any) map[string]any {
	j := map[string]any{"files": filepath.Join(e.dir, demodata.SignalsFolder) + "/", "keys": []any{"user_id"}, "alignment": align, "prefix": "sig_"}
	maps.Copy(j, more)
	return j
}

var signalColumns = []any{"sig_log_activity", "sig_logit_ctr_7d", "sig_recency"}

// TestSplitFilesHiveFolders: click logs whose files have no date column
// split by their date= folders (the days outside the window never
// opened), a key=value folder reads as a string column, and a date
// folder that is not a date fails naming it.
func TestSplitFilesHiveFolders(t *testing.T) {
	e := newFilesEnv(t, demodata.Config{Rows: 3000, Days: 4, Seed: 7, Users: 150, Ads: 20})
	out, err := e.run(t, "hive", map[string]any{"start_date": day(1), "end_date": day(3)}, "")
	if err != nil {
		t.Fatal(err)
	}
	f := out["files"].(map[string]any)
	if f["matched"] != 4.0 || f["pruned"] != 1.0 || f["read"] != 3.0 {
		t.Errorf("files %v: want 4 matched, 1 pruned by its folder, 3 read", f)
	}
	if got := strs(out["train_dates"]); !slices.Equal(got, []string{day(1), day(2)}) || strs(out["eval_dates"])[0] != day(3) {
		t.Errorf("dates %v %v", out["train_dates"], out["eval_dates"])
	}
	if out["timezone"] != "UTC" {
		t.Errorf("timezone %v, want UTC", out["timezone"])
	}

	// Another level of folders: region=eu/ reads as a column.
	src := filepath.Join(e.dir, demodata.ClicksFolder, "date="+day(1), "part-0.parquet")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, region := range []string{"eu", "us%2Fwest"} {
		p := filepath.Join(e.dir, "regions", "region="+region, "date="+day(1), "part-0.parquet")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := expandFiles(context.Background(), e.splits.Store, e.splits.Env, []string{filepath.Join(e.dir, "regions") + "/"})
	if err != nil {
		t.Fatal(err)
	}
	rng := backfill.DateRange{Start: demodata.DefaultStart + 1, End: demodata.DefaultStart + 1}
	fs, err := newFilesSource(context.Background(), e.splits.Store, files, nil, "date", time.UTC, rng)
	if err != nil {
		t.Fatal(err)
	}
	regions := map[string]int{}
	for rec, err := range fs.records(context.Background(), []string{"request_id", "region", "date"}) {
		if err != nil {
			t.Fatal(err)
		}
		r, d := rec.Column(1).(*array.String), rec.Column(2).(*array.Date32)
		for i := range int(rec.NumRows()) {
			if backfill.Day(d.Value(i)) != rng.Start {
				t.Fatalf("row %d: date %s, want the folder's %s", i, backfill.Day(d.Value(i)), rng.Start)
			}
			regions[r.Value(i)]++
		}
		rec.Release()
	}
	if len(regions) != 2 || regions["eu"] == 0 || regions["eu"] != regions["us/west"] {
		t.Errorf("rows by region %v: want the same rows under eu and us/west", regions)
	}

	// date=yesterday/ where date is the date column.
	bad := filepath.Join(e.dir, demodata.ClicksFolder, "date=yesterday", "part-0.parquet")
	if err := os.MkdirAll(filepath.Dir(bad), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.run(t, "bad-folder", map[string]any{"start_date": day(1), "end_date": day(3)}, "")
	if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), "folder date=yesterday/") {
		t.Errorf("got %v (%s), want BadInput naming folder date=yesterday/", err, nodetest.ErrType(err))
	}
}

// splitDays counts a split's rows (train and eval) by date, reading its
// Parquet files as a user would.
func splitDays(t *testing.T, store *Splits, uri string) map[string]int {
	t.Helper()
	ctx := context.Background()
	data, err := Open(ctx, store.Store, uri)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ds := range []string{TrainDataset, EvalDataset} {
		dir := t.TempDir()
		if err := data.Download(ctx, store.Store, ds, dir); err != nil {
			t.Fatal(err)
		}
		paths, _ := filepath.Glob(filepath.Join(dir, "*.parquet"))
		for _, p := range paths {
			pf, err := file.OpenParquetFile(p, false)
			if err != nil {
				t.Fatal(err)
			}
			fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := fr.ReadTable(ctx)
			if err != nil {
				t.Fatal(err)
			}
			col := tbl.Column(tbl.Schema().FieldIndices("date")[0])
			for _, c := range col.Data().Chunks() {
				for i := range c.Len() {
					switch v := c.(type) {
					case *array.Date32:
						out[backfill.Day(v.Value(i)).String()]++
					case *array.Int32:
						out[backfill.Day(v.Value(i)).String()]++
					default:
						t.Fatalf("date column is %s", c.DataType())
					}
				}
			}
			tbl.Release()
			pf.Close()
		}
	}
	return out
}

// TestSplitFilesTimezone: events that straddle midnight UTC, split by
// their timestamp: in Europe/Berlin (the split's timezone, or the run's
// schedule's when the split names none) a 23:30 UTC event is the next
// day's; the rows by day are those the test counts with Go's time zone
// database, and the record names the zone.
func TestSplitFilesTimezone(t *testing.T) {
	dir := t.TempDir()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// 2026-11-20..24, hourly from 20:30 to 03:30 UTC: Berlin is UTC+1.
	ts := array.NewTimestampBuilder(memory.DefaultAllocator, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"})
	ids, labels, users := array.NewInt64Builder(memory.DefaultAllocator), array.NewInt64Builder(memory.DefaultAllocator), array.NewInt64Builder(memory.DefaultAllocator)
	wantUTC, wantBerlin := map[string]int{}, map[string]int{}
	start := time.Date(2026, 11, 20, 20, 30, 0, 0, time.UTC)
	n := 0
	for d := range 5 {
		for h := range 8 {
			at := start.Add(time.Duration(d)*24*time.Hour + time.Duration(h)*time.Hour)
			for k := range 1 + (d*8+h)%5 { // uneven, so that the days' counts differ by zone

				ts.Append(arrow.Timestamp(at.UnixMicro() + int64(k)))
				ids.Append(int64(n))
				labels.Append(int64(n % 2))
				users.Append(int64(n % 7))
				n++
				wantUTC[at.UTC().Format(time.DateOnly)]++
				wantBerlin[at.In(berlin).Format(time.DateOnly)]++
			}
		}
	}
	arrs := []arrow.Array{ids.NewArray(), users.NewArray(), ts.NewArray(), labels.NewArray()}
	sch := arrow.NewSchema([]arrow.Field{{Name: "request_id", Type: arrow.PrimitiveTypes.Int64}, {Name: "user_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "event_ts", Type: arrs[2].DataType()}, {Name: "label", Type: arrow.PrimitiveTypes.Int64}}, nil)
	p := filepath.Join(dir, "events.parquet")
	if err := os.WriteFile(p, parquetBytes(t, []arrow.RecordBatch{array.NewRecordBatch(sch, arrs, int64(n))}, 0, false), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &filesEnv{dir: dir, splits: &Splits{Store: s3test.Start(t).Open(t, ""), Logger: quiet, Env: progenv.Policy{AllowPaths: []string{dir}}}}
	window := func(m map[string]int, from, to string) map[string]int {
		out := map[string]int{}
		for k, v := range m {
			if k >= from && k <= to {
				out[k] = v
			}
		}
		return out
	}
	base := map[string]any{"files": p, "date_column": "event_ts", "sparse": []any{"user_id"}, "start_date": "2026-11-21", "end_date": "2026-11-23"}
	for _, c := range []struct {
		name, tz, runTZ string
		want            map[string]int
		zone            string
	}{
		{"utc", "", "", wantUTC, "UTC"},
		{"berlin", "Europe/Berlin", "", wantBerlin, "Europe/Berlin"},
		{"schedule's zone", "", "Europe/Berlin", wantBerlin, "Europe/Berlin"},
		{"split's zone over the schedule's", "UTC", "Europe/Berlin", wantUTC, "UTC"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := maps.Clone(base)
			if c.tz != "" {
				w["timezone"] = c.tz
			}
			out, err := e.run(t, strings.ReplaceAll(c.name, " ", "-"), w, c.runTZ)
			if err != nil {
				t.Fatal(err)
			}
			got := splitDays(t, e.splits, out["uri"].(string))
			want := window(c.want, "2026-11-21", "2026-11-23")
			t.Logf("%s: rows by day %v (record: timezone %v)", c.name, got, out["timezone"])
			if !maps.Equal(got, want) {
				t.Errorf("rows by day %v, want %v", got, want)
			}
			if out["timezone"] != c.zone {
				t.Errorf("timezone %v, want %s", out["timezone"], c.zone)
			}
		})
	}
	if maps.Equal(window(wantUTC, "2026-11-21", "2026-11-23"), window(wantBerlin, "2026-11-21", "2026-11-23")) {
		t.Fatalf("the test's events do not straddle midnight: UTC %v, Berlin %v", wantUTC, wantBerlin)
	}
	if err := checkSplit(map[string]any{"files": p, "dense": []any{"x"}, "start_date": "2026-11-21", "end_date": "2026-11-23", "timezone": "Mars/Olympus"}); err == nil ||
		!strings.Contains(err.Error(), `timezone: unknown time zone "Mars/Olympus"`) {
		t.Errorf("validation of timezone Mars/Olympus: %v", err)
	}
}

// TestSplitFilesJoinBadInput: a join that cannot be made fails as
// BadInput before anything is written, naming the file.
func TestSplitFilesJoinBadInput(t *testing.T) {
	e := newFilesEnv(t, demodata.Config{Rows: 2000, Days: 3, Seed: 9, Users: 100, Ads: 20})
	clicks := filepath.Join(e.dir, demodata.ClicksFolder, "date="+day(0), "part-0.parquet")
	feats := filepath.Join(e.dir, demodata.SignalsFolder, "date="+day(-1), "part-0.parquet")
	// A feature folder whose user_id is a string.
	str := filepath.Join(e.dir, "strkeys", "date="+day(0), "part-0.parquet")
	sch := arrow.NewSchema([]arrow.Field{{Name: "user_id", Type: arrow.BinaryTypes.String}, {Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}}, {Name: "x", Type: arrow.PrimitiveTypes.Float64}}, nil)
	sb, tb, xb := array.NewStringBuilder(memory.DefaultAllocator), array.NewTimestampBuilder(memory.DefaultAllocator, sch.Field(1).Type.(*arrow.TimestampType)), array.NewFloat64Builder(memory.DefaultAllocator)
	sb.Append("1")
	tb.Append(0)
	xb.Append(1)
	if err := os.MkdirAll(filepath.Dir(str), 0o755); err != nil {
		t.Fatal(err)
	}
	rec := array.NewRecordBatch(sch, []arrow.Array{sb.NewArray(), tb.NewArray(), xb.NewArray()}, 1)
	if err := os.WriteFile(str, parquetBytes(t, []arrow.RecordBatch{rec}, 0, false), 0o644); err != nil {
		t.Fatal(err)
	}
	window := map[string]any{"start_date": day(0), "end_date": day(2), "dense": signalColumns}
	for _, c := range []struct {
		name string
		join map[string]any
		want string
	}{
		{"key missing in training", e.signals("previous_day", map[string]any{"keys": map[string]any{"uid": "user_id"}}), `key "uid" is not a column of the training files (` + clicks + ")"},
		{"key missing in features", e.signals("previous_day", map[string]any{"keys": map[string]any{"user_id": "uid"}}), `key "uid" is not a column of the joined files (` + feats + ")"},
		{"key types differ", map[string]any{"files": filepath.Join(e.dir, "strkeys") + "/", "keys": []any{"user_id"}, "alignment": "previous_day"},
			`key "user_id" is int64 in the training files (` + clicks + `) but "user_id" is utf8 in the joined files (` + str + "): key types must match"},
		{"as_of without publication time", e.signals("as_of", map[string]any{"time_column": "published"}), `have no publication time column "published" (time_column)`},
		{"as_of without event time", e.signals("as_of", map[string]any{"event_time_column": "clicked_at"}), `no event time column "clicked_at"`},
		{"unknown column", e.signals("previous_day", map[string]any{"columns": []any{"nope"}}), `column "nope" is not in the joined files (` + feats + ")"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := maps.Clone(window)
			w["join"] = []any{c.join}
			if c.name == "key types differ" {
				w["dense"] = []any{"x"}
			}
			_, err := e.run(t, "bad", w, "")
			if nodetest.ErrType(err) != errtype.BadInput || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (%s), want BadInput with %q", err, nodetest.ErrType(err), c.want)
			}
		})
	}
	for k, err := range e.splits.Store.List(context.Background(), "checkpoints/") {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("a failed split wrote %s", k.Key)
	}
	// Validation: a join of files needs an alignment and keys; a split
	// of a table joins tables.
	for _, c := range []struct {
		with map[string]any
		want string
	}{
		{map[string]any{"files": clicks, "join": []any{map[string]any{"files": feats, "keys": []any{"user_id"}}}}, "join[0]: give alignment"},
		{map[string]any{"files": clicks, "join": []any{map[string]any{"files": feats, "alignment": "previous_day"}}}, "join[0]: give keys"},
		{map[string]any{"files": clicks, "join": []any{map[string]any{"files": feats, "keys": []any{"user_id"}, "alignment": "yesterday"}}}, `unknown alignment "yesterday"`},
		{map[string]any{"table": "ml.training", "join": []any{map[string]any{"files": feats, "keys": []any{"user_id"}, "alignment": "as_of"}}}, "a split of a table joins staging tables"},
	} {
		w := map[string]any{"start_date": day(1), "end_date": day(2), "dense": []any{"x"}}
		maps.Copy(w, c.with)
		if err := checkSplit(w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validation of %v: %v, want %q", c.with, err, c.want)
		}
	}
}

// TestSplitFilesJoinAgreesWithDuckDB: a split of click logs that joins a
// feature folder under previous_day and as_of holds exactly the rows
// DuckDB's SQL of the same point-in-time join of the same files gives
// (count and order-independent hash), and reads only the days the
// alignment needs of the feature folder.
func TestSplitFilesJoinAgreesWithDuckDB(t *testing.T) {
	duck := needDuckDB(t)
	e := newFilesEnv(t, demodata.Config{Rows: 6000, Days: 5, Seed: 11, Users: 300, Ads: 40})
	first, last := day(1), day(4)
	exprs := []string{"request_id::BIGINT", "date::DATE", "label::INTEGER", "user_id::BIGINT", "ad_id::BIGINT",
		"sig_log_activity::FLOAT", "sig_logit_ctr_7d::FLOAT", "sig_recency::FLOAT"}
	clicks := fmt.Sprintf("read_parquet('%s/%s/*/*.parquet', hive_partitioning=true, hive_types={'date': 'DATE'})", e.dir, demodata.ClicksFolder)
	signals := fmt.Sprintf("read_parquet('%s/%s/*/*.parquet', hive_partitioning=true, hive_types={'date': 'DATE'})", e.dir, demodata.SignalsFolder)
	cols := "t.request_id, t.date, t.label, t.user_id, t.ad_id, f.log_activity AS sig_log_activity, f.logit_ctr_7d AS sig_logit_ctr_7d, f.recency AS sig_recency"
	// Berlin's days of the events: the split's date column is event_ts,
	// its day taken in Europe/Berlin (the split's date column is "date" in
	// its datasets), and the feature side's day is its date= folder.
	berlinDay := "(timezone('Europe/Berlin', t.event_ts))::DATE"
	berlinCols := "t.request_id, " + berlinDay + " AS date, t.label, t.user_id, t.ad_id, f.log_activity AS sig_log_activity, f.logit_ctr_7d AS sig_logit_ctr_7d, f.recency AS sig_recency"
	for _, c := range []struct {
		name, align string
		more        map[string]any
		split       map[string]any
		sql         string
	}{
		{"previous_day", "previous_day", nil, nil, fmt.Sprintf(`(SELECT %s FROM %s t LEFT JOIN %s f ON t.user_id = f.user_id AND f.date = t.date - 1
			WHERE t.date BETWEEN DATE '%s' AND DATE '%s')`, cols, clicks, signals, first, last)},
		// The latest row published at or before the event, no older than
		// lookback_days before the event's day.
		{"as_of", "as_of", map[string]any{"lookback_days": 1.0}, nil, fmt.Sprintf(`(SELECT * EXCLUDE (rn) FROM (SELECT %s,
			row_number() OVER (PARTITION BY t.request_id ORDER BY f.ts DESC NULLS LAST) AS rn
			FROM %s t LEFT JOIN %s f ON t.user_id = f.user_id AND f.ts <= t.event_ts
				AND epoch_us(f.ts) >= (date_diff('day', DATE '1970-01-01', t.date) - 1) * 86400000000
			WHERE t.date BETWEEN DATE '%s' AND DATE '%s') WHERE rn = 1)`, cols, clicks, signals, first, last)},
		{"previous_day in Berlin", "previous_day", map[string]any{"date_column": "date"}, map[string]any{"date_column": "event_ts", "timezone": "Europe/Berlin"},
			fmt.Sprintf(`(SELECT %s FROM %s t LEFT JOIN %s f ON t.user_id = f.user_id AND f.date = %s - 1
			WHERE %s BETWEEN DATE '%s' AND DATE '%s')`, berlinCols, clicks, signals, berlinDay, berlinDay, first, last)},
		// as_of's lookback from midnight in Berlin.
		{"as_of in Berlin", "as_of", map[string]any{"lookback_days": 1.0}, map[string]any{"date_column": "event_ts", "timezone": "Europe/Berlin"},
			fmt.Sprintf(`(SELECT * EXCLUDE (rn) FROM (SELECT %s,
			row_number() OVER (PARTITION BY t.request_id ORDER BY f.ts DESC NULLS LAST) AS rn
			FROM %s t LEFT JOIN %s f ON t.user_id = f.user_id AND f.ts <= t.event_ts
				AND f.ts >= timezone('Europe/Berlin', (%s - 1)::TIMESTAMP)
			WHERE %s BETWEEN DATE '%s' AND DATE '%s') WHERE rn = 1)`, berlinCols, clicks, signals, berlinDay, berlinDay, first, last)},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := map[string]any{"start_date": first, "end_date": last, "dense": signalColumns, "slice": "user_id",
				"join": []any{e.signals(c.align, c.more)}}
			maps.Copy(w, c.split)
			out, err := e.run(t, strings.ReplaceAll(c.name, " ", "-"), w, "")
			if err != nil {
				t.Fatal(err)
			}
			data, err := Open(context.Background(), e.splits.Store, out["uri"].(string))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			for _, ds := range []string{TrainDataset, EvalDataset} {
				if err := data.Download(context.Background(), e.splits.Store, ds, filepath.Join(dir, ds)); err != nil {
					t.Fatal(err)
				}
			}
			got := duck.checksum(t, fmt.Sprintf("read_parquet('%s/*/*.parquet')", dir), exprs)
			want := duck.checksum(t, c.sql, exprs)
			matched := duck.checksum(t, fmt.Sprintf("read_parquet('%s/*/*.parquet') WHERE sig_recency IS NOT NULL", dir), []string{"request_id"})
			t.Logf("%s: split %s, DuckDB %s; rows with a feature %s; %s", c.name, got, want, matched, out["summary"])
			if got != want {
				t.Errorf("the split's rows hash to %s, DuckDB's join of the same files to %s", got, want)
			}
			if strings.Contains(got, `"rows":"0"`) || strings.Contains(matched, `"rows":"0"`) {
				t.Errorf("nothing joined: %s, %s", got, matched)
			}
			joined := out["files"].(map[string]any)["joined"].([]any)[0].(map[string]any)
			if joined["pruned"] != nil && joined["read"].(float64) == 0 {
				t.Errorf("the feature folder was never read: %v", joined)
			}
		})
	}
}

// TestSplitFilesJoinReadsOnlyItsDays: a previous_day join of date
// folders opens only the feature folders of the days before the
// window's days, and the record names each once.
func TestSplitFilesJoinReadsOnlyItsDays(t *testing.T) {
	e := newFilesEnv(t, demodata.Config{Rows: 3000, Days: 5, Seed: 13, Users: 100, Ads: 20})
	out, err := e.run(t, "days", map[string]any{"start_date": day(2), "end_date": day(3), "dense": signalColumns,
		"join": []any{e.signals("previous_day", nil)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	joined := out["files"].(map[string]any)["joined"].([]any)[0].(map[string]any)
	var got []string
	for _, f := range joined["files"].([]any) {
		got = append(got, filepath.Base(filepath.Dir(f.(string))))
	}
	if want := []string{"date=" + day(1), "date=" + day(2)}; !slices.Equal(got, want) {
		t.Errorf("feature folders read %v, want only %v (matched %v)", got, want, joined["matched"])
	}
}
