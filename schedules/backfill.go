package schedules

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/runs"
)

// DateLayout is how dates are written on the command line and in logical
// dates.
const DateLayout = "2006-01-02"

// maxDates bounds a backfill: a typo in a year should not start 36,500 runs.
const maxDates = 3660

// Dates returns the dates from..to, both included, as YYYY-MM-DD.
func Dates(from, to string) ([]string, error) {
	f, err := time.Parse(DateLayout, from)
	if err != nil {
		return nil, fmt.Errorf("--from %q: want a date YYYY-MM-DD", from)
	}
	t, err := time.Parse(DateLayout, to)
	if err != nil {
		return nil, fmt.Errorf("--to %q: want a date YYYY-MM-DD", to)
	}
	if t.Before(f) {
		return nil, fmt.Errorf("--to %s is before --from %s", to, from)
	}
	var out []string
	for d := f; !d.After(t); d = d.AddDate(0, 0, 1) {
		if len(out) == maxDates {
			return nil, fmt.Errorf("%s..%s is more than %d dates", from, to, maxDates)
		}
		out = append(out, d.Format(DateLayout))
	}
	return out, nil
}

// DateRequest is a backfill of a pipeline with no schedule: one run per
// date, with that date as its logical date.
type DateRequest struct {
	Pipeline    string
	Params      map[string]any // the same for every run
	From, To    string         // YYYY-MM-DD, both included
	MaxParallel int            // runs at once; default 1
	TaskQueue   string
}

// DateRun is how one date's run went.
type DateRun struct {
	Date   string
	ID     string       // run id; empty if it did not start
	Result *runs.Result // nil if Err
	Err    error        // it did not start, or could not be watched
}

// BackfillDates starts one run of the pipeline per date, at most
// MaxParallel at once, waits for each, and calls done (from one goroutine
// at a time) as each ends. It returns the runs in date order.
func BackfillDates(ctx context.Context, c client.Client, req DateRequest, done func(DateRun)) ([]DateRun, error) {
	dates, err := Dates(req.From, req.To)
	if err != nil {
		return nil, err
	}
	par := max(req.MaxParallel, 1)
	out := make([]DateRun, len(dates))
	sem := make(chan struct{}, par)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, date := range dates {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return out, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := runDate(ctx, c, req, date)
			mu.Lock()
			defer mu.Unlock()
			out[i] = r
			if done != nil {
				done(r)
			}
		}()
	}
	wg.Wait()
	return out, ctx.Err()
}

func runDate(ctx context.Context, c client.Client, req DateRequest, date string) DateRun {
	r := DateRun{Date: date}
	id, err := startForDate(ctx, c, req, date)
	if err != nil {
		r.Err = err
		return r
	}
	r.ID = id
	r.Result, r.Err = runs.Wait(ctx, c, id, nil)
	return r
}

// startForDate starts a run whose logical date is date.
func startForDate(ctx context.Context, c client.Client, req DateRequest, date string) (string, error) {
	run, err := runs.Start(ctx, c, runs.Request{
		Pipeline: req.Pipeline, Params: req.Params, LogicalDate: date,
		ID: runs.NewID(req.Pipeline + "-for-" + date), TaskQueue: req.TaskQueue,
	})
	if err != nil {
		return "", fmt.Errorf("start run of %s for %s: %w", req.Pipeline, date, err)
	}
	return run.ID, nil
}
