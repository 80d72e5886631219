package features_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
)

// parallelStages is how many stage jobs run at once: as many as a wide
// backfill's stage_features nodes.
const parallelStages = 8

// parallelSpecs are parallelStages stage jobs, each into its own staging
// table, half from each feature table.
func parallelSpecs(e *env, ns string) []features.StageSpec {
	specs := make([]features.StageSpec, parallelStages)
	for i := range specs {
		s := features.StageSpec{
			Training: "ml.training", StartDate: e.day(0), EndDate: e.day(2),
			Staging: fmt.Sprintf("%s.par_%d", ns, i), Prefix: fmt.Sprintf("p%d_", i),
		}
		if i%2 == 0 {
			s.Feature, s.Keys, s.Alignment = "features.user_daily", []string{"user_id"}, "previous_day"
		} else {
			s.Feature, s.Keys, s.Alignment = "features.ad_daily", []string{"ad_id"}, "as_of"
		}
		specs[i] = s
	}
	return specs
}

// stageParallel runs specs at once, each on its own handle on the catalog
// cfg names (its own SQLite connection pool, as a separate worker process
// would have), and returns each job's result and error.
func stageParallel(t testing.TB, cfg lake.Config, specs []features.StageSpec) ([]features.StageResult, []error) {
	t.Helper()
	ctx := context.Background()
	cats := make([]*lake.Catalog, len(specs))
	for i := range cats {
		cat, err := lake.Open(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		cats[i] = cat
	}
	defer func() {
		for _, c := range cats {
			c.Close()
		}
	}()
	results := make([]features.StageResult, len(specs))
	errs := make([]error, len(specs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = features.Stage(ctx, cats[i], s, slog.New(slog.DiscardHandler))
		}()
	}
	close(start)
	wg.Wait()
	return results, errs
}

// TestParallelStagesNeverCollide stages eight feature sets into eight new
// staging tables at once, each job on its own catalog handle, in a
// namespace none of them exists in yet: every create (namespace and table)
// and every commit lands on the first try, and every staging table holds
// every training row of the range.
func TestParallelStagesNeverCollide(t *testing.T) {
	e := newEnv(t, 2000, 3)
	results, errs := stageParallel(t, lake.Config{DataDir: e.dir}, parallelSpecs(e, "staging"))
	for i, err := range errs {
		if err != nil {
			t.Errorf("stage %d: %v", i, err)
		}
	}
	if t.Failed() {
		return
	}
	for i, res := range results {
		got := rowsOf(t, e.cat, res.Staging, "request_id")
		if len(got) != 2000 || res.Rows != 2000 || res.SnapshotID == 0 {
			t.Errorf("stage %d: %s holds %d rows, reported %d (snapshot %d), want 2000", i, res.Staging, len(got), res.Rows, res.SnapshotID)
		}
	}
}

// BenchmarkParallelStages8 times eight stage jobs at once, each on its
// own catalog handle, into a fresh namespace (namespace and table creates
// and commits all racing on the SQL catalog), and reports how many jobs
// failed per round: with write transactions begun DEFERRED (as before the
// lake asked for IMMEDIATE) and IMMEDIATE (what the lake's SQLite URIs now
// set). ICEBERG_SQL_DEBUG=1 also logs every SQLITE_BUSY iceberg-go retried.
//
//	go test -run '^$' -bench ParallelStages8 -benchtime 5x ./features
func BenchmarkParallelStages8(b *testing.B) {
	e := newEnv(b, 2000, 3)
	for _, txlock := range []string{"deferred", "immediate"} {
		b.Run("txlock="+txlock, func(b *testing.B) {
			cfg := lake.Config{
				URI:       "file:" + e.dir + "/catalog.db?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=" + txlock,
				Warehouse: "file://" + e.dir + "/warehouse",
			}
			failed := 0
			for i := 0; b.Loop(); i++ {
				_, errs := stageParallel(b, cfg, parallelSpecs(e, fmt.Sprintf("%s%d", txlock, i)))
				for _, err := range errs {
					if err != nil {
						failed++
						b.Logf("round %d: %v", i, err)
					}
				}
			}
			b.ReportMetric(float64(failed)/float64(b.N), "failed/op")
		})
	}
}
