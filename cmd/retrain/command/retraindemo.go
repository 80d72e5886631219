package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/runs"
)

// retrainDemoPipeline is the pipeline `retrain demo` runs by default.
const retrainDemoPipeline = "ctr-retrain"

// retrainDemo runs ctr-retrain three times on demo data in the local
// stack and checks each run did what the demo promises:
//
//  1. the first run deploys v1 (no production model to compare with);
//  2. a second run on the same data (another trainer seed) is compared
//     against v1, passes and deploys v2;
//  3. a run on data with a deliberately broken feature (ad_quality full of
//     garbage) fails the gate, and the training table and production are
//     exactly as they were before it.
//
// Each run's HTML report goes under DATA/reports/.
type retrainDemo struct {
	s       *localStack
	dataDir string
	data    demodata.Config
	out     io.Writer
	log     *slog.Logger
	cat     *lake.Catalog
	store   *s3store.Store
	reg     *models.Registry
	params  map[string]any
}

// demoScenario is one run of the demo and what it must show.
type demoScenario struct {
	title  string
	broken demodata.Broken
	// write says which demo tables the run starts from freshly written:
	// all of them, none (the data of the run before), or the ad features
	// alone (the broken run: only what it breaks changes).
	write  demoWrite
	params map[string]any
	check  func(d *retrainDemo, res *runs.Result, before demoState) error
}

type demoWrite int

const (
	writeAll demoWrite = iota
	writeNone
	writeAds
)

// demoState is what the broken run must leave as it found.
type demoState struct {
	table      lake.Checksum
	production string
	versions   int
}

func runRetrainDemo(ctx context.Context, s *localStack, dataDir string, data demodata.Config, out io.Writer, progress io.Writer, log *slog.Logger) error {
	d := &retrainDemo{s: s, dataDir: dataDir, data: data, out: out, log: log}
	cat, err := lake.Open(ctx, lake.Config{DataDir: dataDir}, log.With("component", "lake"))
	if err != nil {
		return err
	}
	defer cat.Close()
	d.cat = cat
	if s.s3 == nil {
		return errors.New("the demo needs the dev stack's S3 server")
	}
	if d.store, err = s3store.Open(ctx, s.s3.StoreConfig("")); err != nil {
		return err
	}
	d.reg = models.New(d.store)
	start := demodata.DefaultStart
	d.params = map[string]any{
		"start_date": start.String(),
		"end_date":   (start + backfill.Day(data.Days) - 1).String(),
	}

	scenarios := []demoScenario{
		{title: "first run: no production model yet", check: func(d *retrainDemo, res *runs.Result, _ demoState) error {
			if res.Status != runs.StatusSucceeded {
				return fmt.Errorf("run %s: %s", res.Status, res.Error)
			}
			if v := res.Node("deploy").Outputs["version"]; v != "v1" {
				return fmt.Errorf("deployed %v, want v1", v)
			}
			return nil
		}},
		{title: "second run, same data, trainer seed 2: compared against v1", params: map[string]any{"seed": 2}, write: writeNone,
			check: func(d *retrainDemo, res *runs.Result, _ demoState) error {
				if res.Status != runs.StatusSucceeded {
					return fmt.Errorf("run %s: %s", res.Status, res.Error)
				}
				// ctr-retrain caches its nodes: what the seed does not
				// reach is served from the first run, and the promotion
				// finds itself in place.
				for _, id := range []string{"stage_user", "stage_ad", "stats_user", "stats_ad", "split"} {
					if c := res.Node(id).Cache; c == nil || !c.Hit {
						return fmt.Errorf("node %s was not served from the cache: %s", id, res.Node(id).Cache.Note(time.Now()))
					}
				}
				if c := res.Node("train").Cache; c == nil || c.Hit {
					return errors.New("train was served from the cache; its seed changed")
				}
				if res.Node("promote").Outputs["already"] != true {
					return fmt.Errorf("promote committed again: %v", res.Node("promote").Outputs["summary"])
				}
				if b := res.Node("evaluate").Outputs["baseline_version"]; b != "v1" {
					return fmt.Errorf("baseline %v, want v1", b)
				}
				return nil
			}},
		{title: "third run: feature ad_quality broken (garbage values)", broken: demodata.Broken{Feature: "ad_quality", Mode: "garbage"}, write: writeAds,
			check: func(d *retrainDemo, res *runs.Result, before demoState) error {
				if res.Status != runs.StatusFailed || res.Node("gate").Status != runs.NodeFailed {
					return fmt.Errorf("run %s, gate %s: the gate should have rejected the candidate", res.Status, res.Node("gate").Status)
				}
				after, err := d.state(ctx)
				if err != nil {
					return err
				}
				if after.table.Digest != before.table.Digest || after.table.Rows != before.table.Rows {
					return fmt.Errorf("ml.training changed: checksum %s (%d rows) before, %s (%d rows) after", before.table.Digest, before.table.Rows, after.table.Digest, after.table.Rows)
				}
				if after.production != before.production || after.versions != before.versions {
					return fmt.Errorf("production %s (%d versions) before, %s (%d versions) after", before.production, before.versions, after.production, after.versions)
				}
				fmt.Fprintf(d.out, "  table ml.training unchanged (checksum %s, %d rows); production still %s\n", after.table.Digest, after.table.Rows, after.production)
				return nil
			}},
	}
	var failed []string
	for i, sc := range scenarios {
		fmt.Fprintf(d.out, "\n== run %d: %s\n", i+1, sc.title)
		// The first run starts from freshly written tables, the second
		// from what the first left (the same data), the third from the ad
		// features written anew with one broken: each run recomputes what
		// changed and the node cache serves the rest.
		cfg := d.data
		cfg.Broken = sc.broken
		tables := demodata.DefaultTables
		switch sc.write {
		case writeNone:
			tables = demodata.Tables{}
		case writeAds:
			// Only features.ad_daily changes; the others are written
			// aside, as Write writes the three together.
			tables = demodata.Tables{Training: "features.demo_scratch_training", Users: "features.demo_scratch_users", Ads: demodata.DefaultTables.Ads}
		}
		if tables.Training != "" {
			if _, err := demodata.Write(ctx, d.cat, cfg, tables, true, log); err != nil {
				return fmt.Errorf("write demo data: %w", err)
			}
		}
		before, err := d.state(ctx)
		if err != nil {
			return err
		}
		started := time.Now()
		res, err := d.run(ctx, sc.params, progress)
		if err != nil {
			return err
		}
		fmt.Fprintf(d.out, "  wall time %s\n", time.Since(started).Round(time.Millisecond))
		if err := sc.check(d, res, before); err != nil {
			fmt.Fprintf(d.out, "  NOT AS EXPECTED: %v\n", err)
			failed = append(failed, fmt.Sprintf("run %d: %v", i+1, err))
		}
	}
	if len(failed) > 0 {
		return &cli.ExitError{Code: 2, Err: fmt.Errorf("demo: %s", strings.Join(failed, "; "))}
	}
	fmt.Fprintf(d.out, "\nall three runs did what they should; production is %s\n", mustProduction(ctx, d))
	return nil
}

func mustProduction(ctx context.Context, d *retrainDemo) string {
	st, err := d.state(ctx)
	if err != nil {
		return "?"
	}
	return st.production
}

func (d *retrainDemo) state(ctx context.Context) (demoState, error) {
	var st demoState
	tbl, err := d.cat.Load(ctx, demodata.DefaultTables.Training)
	if err != nil {
		return st, err
	}
	if st.table, err = lake.TableChecksum(ctx, tbl); err != nil {
		return st, err
	}
	if v, err := d.reg.Resolve(ctx, "ctr@production"); err == nil {
		st.production = v.Version
	} else if !errors.Is(err, models.ErrNotFound) {
		return st, err
	}
	vs, err := d.reg.List(ctx, "ctr")
	if err != nil && !errors.Is(err, models.ErrNotFound) {
		return st, err
	}
	st.versions = len(vs)
	return st, nil
}

// run starts ctr-retrain, waits for it, prints what it did and writes its
// report.
func (d *retrainDemo) run(ctx context.Context, extra map[string]any, progress io.Writer) (*runs.Result, error) {
	params := map[string]any{}
	for k, v := range d.params {
		params[k] = v
	}
	for k, v := range extra {
		params[k] = v
	}
	run, err := runs.Start(ctx, d.s.client, runs.Request{Pipeline: retrainDemoPipeline, Params: params})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "running %s as %s\n", retrainDemoPipeline, run.ID)
	res, err := runs.Wait(ctx, d.s.client, run.ID, cli.NewProgress(progress).Update)
	if err != nil {
		return nil, err
	}
	cli.PrintSummary(d.out, res)
	d.describe(res)
	path := cli.ReportPath(d.dataDir, res.ID)
	links := cli.ReportLinks{UIAddress: d.s.server.UIAddress(), Namespace: d.s.server.Namespace()}
	if err := cli.WriteRunReport(ctx, d.s.client, d.store, res, path, links); err != nil {
		fmt.Fprintf(d.out, "  report: %v\n", err)
	} else {
		fmt.Fprintf(d.out, "  report: %s\n", path)
	}
	return res, nil
}

// describe prints the run's headline: candidate vs baseline and the gate.
func (d *retrainDemo) describe(res *runs.Result) {
	if ev := res.Node("evaluate"); ev != nil && ev.Status == runs.NodeSucceeded {
		base := "no baseline"
		if v, _ := ev.Outputs["baseline_version"].(string); v != "" {
			b, _ := ev.Outputs["baseline"].(map[string]any)
			base = fmt.Sprintf("baseline %s AUC %s, log loss %s", v, figure(b["auc"]), figure(b["log_loss"]))
		}
		fmt.Fprintf(d.out, "  candidate AUC %s, log loss %s; %s\n", figure(ev.Outputs["auc"]), figure(ev.Outputs["log_loss"]), base)
	}
	if g := res.Node("gate"); g != nil {
		switch g.Status {
		case runs.NodeSucceeded:
			fmt.Fprintf(d.out, "  gate: passed=%v: %v\n", g.Outputs["passed"], g.Outputs["reason"])
		case runs.NodeFailed:
			fmt.Fprintf(d.out, "  gate: %s\n", g.Error)
		}
	}
	if dep := res.Node("deploy"); dep != nil && dep.Status == runs.NodeSucceeded {
		fmt.Fprintf(d.out, "  deployed %v (production was %q)\n", dep.Outputs["ref"], dep.Outputs["previous_version"])
	}
	for _, c := range res.Compensations {
		fmt.Fprintf(d.out, "  on_failure: %s %s\n", c.ID, c.Status)
	}
}

func figure(v any) string {
	if f, ok := v.(float64); ok {
		return fmt.Sprintf("%.4f", f)
	}
	return "n/a"
}
