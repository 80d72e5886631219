package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// TestSplitScaling measures how the time of a split falls with workers: the
// split of the demo data's whole window joining two staging tables, one
// bucket group per bucket (16), run on one `retrain-worker` process, then
// on two, then on one again, each process given RETRAIN_SPLIT_SCALE_PROCS
// cores' worth (GOMAXPROCS, and as many group slots) as a host of that
// size would be. The lake is a SQLite catalog and a warehouse on local
// disk, the checkpoints on the S3 server. It runs only when asked:
//
//	RETRAIN_SPLIT_SCALE_ROWS=2000000 RETRAIN_SPLIT_SCALE_DAYS=10 \
//	  go test ./integration/ -run TestSplitScaling -count=1 -v -timeout 30m
//
// The figures are the split node's wall time, start to end, from its run.
func TestSplitScaling(t *testing.T) {
	rows := scaleEnv("RETRAIN_SPLIT_SCALE_ROWS", 0)
	if rows == 0 {
		t.Skip("set RETRAIN_SPLIT_SCALE_ROWS (e.g. 2000000) to measure a split on one and two workers")
	}
	days := int(scaleEnv("RETRAIN_SPLIT_SCALE_DAYS", 10))
	procs := scaleEnv("RETRAIN_SPLIT_SCALE_PROCS", 1)
	ctx := context.Background()
	dir := t.TempDir()
	e := &sharedLake{srv: s3test.Start(t), queue: newQueue(t),
		cfg: lake.Config{URI: "file:" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")}}
	cat, err := lake.Open(ctx, e.cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	e.cat = cat
	started := time.Now()
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: rows, Days: days, Seed: 1}, demodata.DefaultTables, false, quiet); err != nil {
		t.Fatal(err)
	}
	e.start, e.end = demodata.DefaultStart.String(), (demodata.DefaultStart + backfill.Day(days-1)).String()
	for _, s := range []features.StageSpec{
		{Feature: "features.user_daily", Keys: []string{"user_id"}, Alignment: "previous_day", Prefix: "u_"},
		{Feature: "features.ad_daily", Keys: []string{"ad_id"}, Alignment: "as_of", Prefix: "a_"},
	} {
		s.Training, s.StartDate, s.EndDate = "ml.training", e.start, e.end
		res, err := features.Stage(ctx, cat, s, quiet)
		if err != nil {
			t.Fatal(err)
		}
		e.staging = append(e.staging, res.Staging)
	}
	t.Logf("lake: %d rows over %d days and 2 staging tables written in %.1f s", rows, days, time.Since(started).Seconds())
	store := e.srv.Open(t, "store")
	bin := treeBinary(t, "./cmd/retrain-worker")
	e.workerEnv = []string{"GOMAXPROCS=" + strconv.FormatInt(procs, 10)}
	flags := []string{"--s3-uri", e.srv.URI("store"), "--activity-concurrency", fmt.Sprintf("split=%d", procs)}

	a := e.startWorker(t, bin, "A", flags...)
	one := e.split(t, store, "one", 16, rows, nil)
	b := e.startWorker(t, bin, "B", flags...)
	two := e.split(t, store, "two", 16, rows, nil)
	wantSums(t, "two workers", two.sums, one.sums)
	// B leaves; A alone again, its caches as warm as they were for two.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = b.cmd.Wait()
	b.killed = true
	again := e.split(t, store, "again", 16, rows, nil)
	wantSums(t, "one worker again", again.sums, one.sums)

	names := map[string]string{a.identity: "A", b.identity: "B"}
	for _, r := range []struct {
		name string
		s    *splitRun
	}{{"one worker", one}, {"two workers", two}, {"one worker again", again}} {
		per := map[string]int{}
		for id, n := range r.s.perWorker() {
			per[names[id]] = n
		}
		t.Logf("%s (GOMAXPROCS %d, %d group slots each): split node %.2f s; groups per worker %v", r.name, procs, procs, r.s.wall.Seconds(), per)
	}
	t.Logf("two workers: %.2fx the speed of one (first run), %.2fx (second run)", one.wall.Seconds()/two.wall.Seconds(), again.wall.Seconds()/two.wall.Seconds())
}

func scaleEnv(key string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(key), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}
