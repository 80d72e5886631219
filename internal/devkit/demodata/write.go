package demodata

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"golang.org/x/sync/errgroup"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

// Result reports what Write wrote.
type Result struct {
	Tables       Tables `json:"tables"`
	Config       Config `json:"-"`
	First, Last  string `json:"-"`
	TrainingRows int64  `json:"training_rows"`
	UserRows     int64  `json:"user_rows"`
	AdRows       int64  `json:"ad_rows"`
	SignalRows   int64  `json:"signal_rows"`
	NoiseRows    int64  `json:"noise_rows"`
	// Snapshots are the tables' commits, in the order training, users,
	// ads, signals and noise (when written).
	Snapshots []int64       `json:"-"`
	Elapsed   time.Duration `json:"elapsed"`
}

// Write generates the demo data and writes it into new tables (training,
// users, ads and, when tables names them, signals and noise), one commit
// each. Existing tables are an error unless replace is set, in
// which case they are dropped first (their files stay until a cleanup).
// Days are generated one at a time and streamed to the three writers, so
// memory stays bounded whatever the row count.
func Write(ctx context.Context, cat *lake.Catalog, cfg Config, tables Tables, replace bool, log *slog.Logger) (Result, error) {
	if log == nil {
		log = slog.Default()
	}
	started := time.Now()
	gen, err := NewGenerator(cfg)
	if err != nil {
		return Result{}, err
	}
	cfg = gen.Config()
	res := Result{Tables: tables, Config: cfg, First: cfg.Start.String(), Last: (cfg.Start + backfill.Day(cfg.Days) - 1).String()}

	names := []string{tables.Training, tables.Users, tables.Ads}
	schemas := []*iceberg.Schema{TrainingSchema(), UserSchema(), AdSchema()}
	specs := []lake.TableSpec{TrainingSpec(cfg.Buckets, cfg.Unsorted), FeatureSpec(), FeatureSpec()}
	// The experiment's groups, when named, are tables 3 and 4.
	if (tables.Signals == "") != (tables.Noise == "") {
		return res, fmt.Errorf("name both the signals and the noise table, or neither")
	}
	if tables.Noise != "" {
		names = append(names, tables.Signals, tables.Noise)
		schemas = append(schemas, UserFloatsSchema(SignalFeatureNames), UserFloatsSchema(NoiseFeatureNames))
		specs = append(specs, FeatureSpec(), FeatureSpec())
	}
	for _, name := range names {
		exists, err := cat.Exists(ctx, name)
		if err != nil {
			return res, err
		}
		if exists && !replace {
			return res, fmt.Errorf("table %s exists: pass --replace to overwrite the demo tables", name)
		}
		if exists {
			if err := cat.DropTable(ctx, name); err != nil {
				return res, err
			}
		}
	}
	tbls := make([]*table.Table, len(names))
	arrowSchemas := make([]*arrow.Schema, len(names))
	for i, name := range names {
		if tbls[i], err = cat.CreateTable(ctx, name, schemas[i], specs[i]); err != nil {
			return res, err
		}
		if arrowSchemas[i], err = table.SchemaToArrowSchema(tbls[i].Schema(), nil, true, false); err != nil {
			return res, err
		}
	}
	mem := memory.NewGoAllocator()

	// One producer, a writer per table, each fed a day at a time.
	chans := make([]chan arrow.RecordBatch, len(names))
	for i := range chans {
		chans[i] = make(chan arrow.RecordBatch, 2)
	}
	chans[0] = make(chan arrow.RecordBatch, 16)
	res.Snapshots = make([]int64, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer func() {
			for _, c := range chans {
				close(c)
			}
		}()
		send := func(i int, rec arrow.RecordBatch) error {
			select {
			case chans[i] <- rec:
				return nil
			case <-gctx.Done():
				rec.Release()
				return gctx.Err()
			}
		}
		for !gen.Done() {
			day := gen.Next()
			if day.Impressions != nil {
				for _, rec := range trainingRecords(mem, arrowSchemas[0], day) {
					res.TrainingRows += rec.NumRows()
					if err := send(0, rec); err != nil {
						return err
					}
				}
			}
			ur := userRecord(mem, arrowSchemas[1], day, gen)
			res.UserRows += ur.NumRows()
			if err := send(1, ur); err != nil {
				return err
			}
			ar := adRecord(mem, arrowSchemas[2], day, gen)
			res.AdRows += ar.NumRows()
			if err := send(2, ar); err != nil {
				return err
			}
			if len(chans) > 3 {
				sr := signalRecord(mem, arrowSchemas[3], day, gen)
				res.SignalRows += sr.NumRows()
				if err := send(3, sr); err != nil {
					return err
				}
				nr := noiseRecord(mem, arrowSchemas[4], day, gen)
				res.NoiseRows += nr.NumRows()
				if err := send(4, nr); err != nil {
					return err
				}
			}
			log.Debug("demo data: generated day", "day", day.Day)
		}
		return nil
	})
	props := iceberg.Properties{
		"retrain.demo-seed": strconv.FormatUint(cfg.Seed, 10),
		"retrain.demo-rows": strconv.FormatInt(cfg.Rows, 10),
		"retrain.demo-days": strconv.Itoa(cfg.Days),
	}
	for i, t := range tbls {
		g.Go(func() error {
			files, err := lake.WriteFiles(gctx, t, arrowSchemas[i], drain(chans[i]), table.WithClusteredWrite())
			if err != nil {
				return err
			}
			committed, err := cat.AddFiles(gctx, names[i], files, props)
			if err != nil {
				return err
			}
			res.Snapshots[i] = committed.CurrentSnapshot().SnapshotID
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		// Drain what a failed writer left so the producer can finish.
		for _, c := range chans {
			for rec := range c {
				rec.Release()
			}
		}
		return res, err
	}
	res.Elapsed = time.Since(started)
	return res, nil
}

func drain(c <-chan arrow.RecordBatch) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		for rec := range c {
			if !yield(rec, nil) {
				rec.Release()
				for rest := range c {
					rest.Release()
				}
				return
			}
		}
	}
}

// trainingRecords are one record per bucket of a day's impressions,
// in bucket order: each is one partition of the training table.
func trainingRecords(mem memory.Allocator, schema *arrow.Schema, day *DayData) []arrow.RecordBatch {
	im := day.Impressions
	var out []arrow.RecordBatch
	for start := 0; start < im.Len(); {
		end := start
		for end < im.Len() && im.Bucket[end] == im.Bucket[start] {
			end++
		}
		rb := newRecordBuilder(mem, schema)
		rb.int64s("request_id", im.RequestID[start:end])
		rb.int64s("user_id", im.UserID[start:end])
		rb.int64s("ad_id", im.AdID[start:end])
		rb.stamps("event_ts", im.EventTS[start:end])
		rb.dates("date", int32(day.Day), end-start)
		rb.int32s("label", im.Label[start:end])
		out = append(out, rb.record())
		rb.release()
		start = end
	}
	return out
}

func userRecord(mem memory.Allocator, schema *arrow.Schema, day *DayData, g *Generator) arrow.RecordBatch {
	n := len(day.Users)
	ids := make([]int64, n)
	cols := make([][]float64, 5)
	for i := range cols {
		cols[i] = make([]float64, n)
	}
	lists := make([][]int64, n)
	for u, f := range day.Users {
		ids[u] = int64(u)
		cols[0][u], cols[1][u], cols[2][u], cols[3][u], cols[4][u] = f.Activity, f.CTR7d, f.Sessions, f.RecencyDays, f.ClickRateDay
		lists[u] = f.RecentAds
	}
	rb := newRecordBuilder(mem, schema)
	defer rb.release()
	rb.int64s("user_id", ids)
	rb.dates("date", int32(day.Day), n)
	rb.stamps("ts", g.publishStamps(streamUserActivity, day.Day, n))
	for i, name := range userFeatureNames[:5] {
		rb.floats(name, cols[i], g.cfg.Broken, g, uint64(day.Day))
	}
	rb.lists("recent_ads", lists, g.cfg.Broken)
	return rb.record()
}

func adRecord(mem memory.Allocator, schema *arrow.Schema, day *DayData, g *Generator) arrow.RecordBatch {
	n := len(day.Ads)
	ids := make([]int64, n)
	cols := [3][]float64{make([]float64, n), make([]float64, n), make([]float64, n)}
	for a, f := range day.Ads {
		ids[a] = int64(a)
		cols[0][a], cols[1][a], cols[2][a] = f.Quality, f.CTR7d, f.AgeDays
	}
	rb := newRecordBuilder(mem, schema)
	defer rb.release()
	rb.int64s("ad_id", ids)
	rb.dates("date", int32(day.Day), n)
	rb.stamps("ts", g.publishStamps(streamAdDaily, day.Day, n))
	for i, name := range adFeatureNames {
		rb.floats(name, cols[i], g.cfg.Broken, g, uint64(day.Day))
	}
	return rb.record()
}

// signalRecord is a day of features.user_signals: the user terms of the
// label model's logit, from the same features as features.user_daily.
func signalRecord(mem memory.Allocator, schema *arrow.Schema, day *DayData, g *Generator) arrow.RecordBatch {
	n := len(day.Users)
	cols := [3][]float64{make([]float64, n), make([]float64, n), make([]float64, n)}
	for u, f := range day.Users {
		cols[0][u], cols[1][u], cols[2][u] = math.Log(f.Activity), logit(f.CTR7d), f.RecencyDays/30
	}
	return userFloatsRecord(mem, schema, day, g, SignalFeatureNames, cols[:])
}

// noiseRecord is a day of features.noise_daily: draws of their own stream,
// which the labels never see, so a model given them can only overfit.
func noiseRecord(mem memory.Allocator, schema *arrow.Schema, day *DayData, g *Generator) arrow.RecordBatch {
	n := len(day.Users)
	cols := [][]float64{make([]float64, n), make([]float64, n)}
	for u := range n {
		for c := range cols {
			cols[c][u] = g.normal(streamNoise, uint64(u)<<1|uint64(c), uint64(day.Day))
		}
	}
	return userFloatsRecord(mem, schema, day, g, NoiseFeatureNames, cols)
}

func userFloatsRecord(mem memory.Allocator, schema *arrow.Schema, day *DayData, g *Generator, names []string, cols [][]float64) arrow.RecordBatch {
	n := len(day.Users)
	ids := make([]int64, n)
	for u := range n {
		ids[u] = int64(u)
	}
	rb := newRecordBuilder(mem, schema)
	defer rb.release()
	rb.int64s("user_id", ids)
	rb.dates("date", int32(day.Day), n)
	rb.stamps("ts", g.publishStamps(streamUserActivity, day.Day, n))
	for c, name := range names {
		rb.floats(name, cols[c], Broken{}, g, uint64(day.Day))
	}
	return rb.record()
}
