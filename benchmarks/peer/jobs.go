package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// userFeatures are features.user_daily's feature columns, which stage 1
// joins (prefixed u_), and adFeatures features.ad_daily's.
var (
	userFeatures = []string{"activity", "ctr_7d", "sessions", "recency_days", "click_rate_day", "recent_ads"}
	adFeatures   = []string{"ad_quality", "ad_ctr_7d", "ad_age_days"}
)

const lookbackDays = 7 // StageSpec's as_of default

// jobs builds the three compared jobs. The promotion's staging tables are
// staged here once, untimed; both engines promote them.
func (b *bench) jobs(ctx context.Context) ([]*job, error) {
	training, err := tableFiles(ctx, b.cat, demodata.DefaultTables.Training)
	if err != nil {
		return nil, err
	}
	users, err := b.featureFiles(ctx, demodata.DefaultTables.Users)
	if err != nil {
		return nil, err
	}
	stageCols := append([]string{"request_id", "date", "user_id"}, prefixed("u_", userFeatures)...)
	var uSelect []string
	for _, f := range userFeatures {
		uSelect = append(uSelect, fmt.Sprintf("u.%s AS u_%s", f, f))
	}
	// Stage 1, previous_day: each training row gets its user's row of the
	// day before. The training files' date=/user_id_bucket= folders give
	// DuckDB the bucket, which it partitions the output by, as retrain
	// does (date x bucket(16, user_id), zstd).
	prev := fmt.Sprintf(`SELECT t.request_id, t.date, t.user_id, %s, t.user_id_bucket
FROM %s t LEFT JOIN %s u ON u.user_id = t.user_id AND u.date = t.date - 1`,
		strings.Join(uSelect, ", "), readParquet(training, true), readParquet(users, false))
	// Stage 1, as_of: the user's latest row at or before the event, if it
	// is at most lookback days old (from the start of the event's day), as
	// backfill.AsOf's window says.
	asOf := fmt.Sprintf(`SELECT t.request_id, t.date, t.user_id, %s, t.user_id_bucket
FROM %s t ASOF LEFT JOIN %s u ON u.user_id = t.user_id AND u.ts <= t.event_ts`,
		strings.Join(asOfSelect(userFeatures, lookbackDays), ", "), readParquet(training, true), readParquet(users, false))

	// The promotion's inputs: both feature groups staged previous_day.
	sUser, sAd := "ml.peer_s_user", "ml.peer_s_ad"
	for _, s := range []features.StageSpec{
		b.stageSpec(demodata.DefaultTables.Users, sUser, "u_", []string{"user_id"}, "previous_day"),
		b.stageSpec(demodata.DefaultTables.Ads, sAd, "", []string{"ad_id"}, "previous_day"),
	} {
		if _, err := features.Stage(ctx, b.cat, s, b.log); err != nil {
			return nil, fmt.Errorf("stage %s for the promotion: %w", s.Staging, err)
		}
	}
	sUserFiles, err := tableFiles(ctx, b.cat, sUser)
	if err != nil {
		return nil, err
	}
	sAdFiles, err := tableFiles(ctx, b.cat, sAd)
	if err != nil {
		return nil, err
	}
	var promoted []string
	for _, f := range userFeatures {
		promoted = append(promoted, "su.u_"+f)
	}
	for _, f := range adFeatures {
		promoted = append(promoted, "sa."+f)
	}
	trainingCols := []string{"request_id", "user_id", "ad_id", "event_ts", "date", "label"}
	// The promotion: every training row with the staged columns of both
	// staging tables, by primary key, written back date x bucket.
	promote := fmt.Sprintf(`SELECT %s, %s, t.user_id_bucket
FROM %s t
LEFT JOIN %s su ON su.request_id = t.request_id
LEFT JOIN %s sa ON sa.request_id = t.request_id`,
		strings.Join(prefixed("t.", trainingCols), ", "), strings.Join(promoted, ", "),
		readParquet(training, true), readParquet(sUserFiles, false), readParquet(sAdFiles, false))
	promoteCols := append(append(trainingCols, prefixed("u_", userFeatures)...), adFeatures...)

	newJob := func(name string, run func(context.Context) (sample, []string, error), sql string, cols []string) *job {
		return &job{name: name, retrain: run, columns: cols, times: map[string][]sample{},
			duck: duckJob{SQL: sql, Out: filepath.Join(b.dir, "duckdb", name), PartitionBy: []string{"date", "user_id_bucket"}}}
	}
	return []*job{
		newJob("stage_previous_day", b.stage(b.stageSpec(demodata.DefaultTables.Users, "ml.peer_stage_previous_day", "u_", []string{"user_id"}, "previous_day")), prev, stageCols),
		newJob("stage_as_of", b.stage(b.stageSpec(demodata.DefaultTables.Users, "ml.peer_stage_as_of", "u_", []string{"user_id"}, "as_of")), asOf, stageCols),
		newJob("promote", b.promote([]string{sUser, sAd}), promote, promoteCols),
	}, nil
}

// featureFiles lists the feature table's files that stage 1 may read: the
// training range, the day before and the as_of lookback.
func (b *bench) featureFiles(ctx context.Context, name string) ([]string, error) {
	tbl, err := b.cat.Load(ctx, name)
	if err != nil {
		return nil, err
	}
	from := b.first - lookbackDays
	return scanFiles(ctx, tbl.Scan(table.WithRowFilter(lake.DateRange("date", int32(from), int32(b.last)))))
}

func asOfSelect(cols []string, lookback int) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = fmt.Sprintf("CASE WHEN u.ts >= (t.date - %d)::TIMESTAMPTZ THEN u.%s END AS u_%s", lookback, c, c)
	}
	return out
}

func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

// readParquet is DuckDB's read of a list of files. With hive, the
// date=/user_id_bucket= folders of the path become columns (the file's own
// date column agrees with its folder).
func readParquet(files []string, hive bool) string {
	quoted := make([]string, len(files))
	for i, f := range files {
		quoted[i] = "'" + strings.ReplaceAll(f, "'", "''") + "'"
	}
	return fmt.Sprintf("read_parquet([%s], hive_partitioning=%t)", strings.Join(quoted, ", "), hive)
}

// promote runs a whole bucketed promotion, one bucket group per core at a
// time as a worker would, then rolls the training table back (untimed) so
// the next round promotes the same table.
func (b *bench) promote(staging []string) func(ctx context.Context) (sample, []string, error) {
	return func(ctx context.Context) (sample, []string, error) {
		spec := features.PromoteSpec{Training: demodata.DefaultTables.Training, Staging: staging, StartDate: b.start, EndDate: b.end}
		var res features.PromoteResult
		s, err := timed(func() error {
			var err error
			res, err = features.Promote(ctx, b.cat, spec, fmt.Sprintf("peer/%d", time.Now().UnixNano()), runtime.NumCPU(), b.log)
			return err
		})
		if err != nil {
			return s, nil, err
		}
		files, err := tableFiles(ctx, b.cat, spec.Training)
		if err != nil {
			return s, nil, err
		}
		if _, err := b.cat.Rollback(ctx, spec.Training, res.PreviousSnapshot); err != nil {
			return s, nil, err
		}
		return s, files, nil
	}
}

// check compares the last round's outputs of both engines: row counts and
// an order-independent checksum over the job's columns.
func (b *bench) check(ctx context.Context, j *job) (string, error) {
	r, err := b.checksum(ctx, readParquet(j.retrainFiles, false), j.columns)
	if err != nil {
		return "", fmt.Errorf("checksum retrain's output: %w", err)
	}
	d, err := b.checksum(ctx, fmt.Sprintf("read_parquet('%s/**/*.parquet', hive_partitioning=true)", j.duck.Out), j.columns)
	if err != nil {
		return "", fmt.Errorf("checksum DuckDB's output: %w", err)
	}
	if r != d {
		return "", fmt.Errorf("outputs differ: retrain %s, DuckDB %s", r, d)
	}
	fmt.Fprintf(os.Stderr, "peer: %s outputs agree: %s\n", j.name, r)
	return "agree (" + strings.SplitN(r, " ", 2)[0] + " rows)", nil
}
