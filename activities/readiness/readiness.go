// Package readiness is the activity that checks one `wait_for` condition
// for a run: it gathers what the lake, the file system, the object store
// or a command say about the run's date, and leaves the verdict to
// internal/readiness. A condition that can never hold as written (a table
// the lake lacks, a glob outside --allow-paths, a program the worker does
// not allow) fails as BadInput, not retried, so the run fails at once
// instead of at its deadline.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/readiness"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// Input is one check (runs.ReadinessCheck), registered as
// runs.ReadinessActivity.
type Input = runs.ReadinessCheck

// Checker holds what checks need from the worker.
type Checker struct {
	Lake          *lake.Lazy
	Store         *s3store.Store
	AllowCommands []string
	Env           progenv.Policy
	Logger        *slog.Logger
}

// commandTimeout bounds one run of a command condition: a check that
// hangs is a check that said "not yet".
const commandTimeout = time.Minute

// Check checks a condition once.
func (c *Checker) Check(ctx context.Context, in Input) (readiness.Observation, error) {
	if _, err := time.Parse(time.DateOnly, in.LogicalDate); err != nil {
		return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for %s: the run has no logical date (%q)", in.Condition.Name(), in.LogicalDate)
	}
	w := in.Condition
	switch w.Kind() {
	case "table":
		return c.table(ctx, w, in.LogicalDate)
	case "files":
		return c.files(ctx, w)
	}
	return c.command(ctx, w)
}

func (c *Checker) table(ctx context.Context, w dags.Wait, date string) (readiness.Observation, error) {
	if c.Lake == nil || !c.Lake.Configured() {
		return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for table %s: this worker has no lake (--catalog-uri)", w.Table)
	}
	cat, err := c.Lake.Catalog(ctx)
	if err != nil {
		return readiness.Observation{}, fmt.Errorf("wait_for table %s: %w", w.Table, err)
	}
	ok, err := cat.Exists(ctx, w.Table)
	if err != nil {
		return readiness.Observation{}, fmt.Errorf("wait_for table %s: %w", w.Table, err)
	}
	if !ok {
		return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for table %s: the lake has no such table", w.Table)
	}
	tbl, err := cat.Load(ctx, w.Table)
	if err != nil {
		return readiness.Observation{}, fmt.Errorf("wait_for table %s: %w", w.Table, err)
	}
	if _, ok := tbl.Schema().FindFieldByName(w.DateColumn); !ok {
		return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for table %s: no date column %q", w.Table, w.DateColumn)
	}
	facts := readiness.TableFacts{Table: w.Table, Date: date}
	if snap := tbl.CurrentSnapshot(); snap != nil {
		facts.HasSnapshot, facts.SnapshotID = true, snap.SnapshotID
		facts.CommittedAt = time.UnixMilli(snap.TimestampMs).UTC()
		day, _ := time.Parse(time.DateOnly, date)
		d := int32(day.Unix() / 86400)
		if err := countDates(ctx, tbl, snap.SnapshotID, w.DateColumn, d, &facts); err != nil {
			return readiness.Observation{}, fmt.Errorf("wait_for table %s: %w", w.Table, err)
		}
	}
	return readiness.Table(facts, readiness.TableWant{MinRows: w.MinRows, CompleteAfter: w.CompleteAfter})
}

// countDates counts the snapshot's rows of day d and of the day before.
func countDates(ctx context.Context, tbl *table.Table, snap int64, col string, d int32, facts *readiness.TableFacts) error {
	filter := table.WithRowFilter(lake.DateRange(col, d-1, d))
	_, recs, err := lake.Scan(ctx, tbl, table.WithSnapshotID(snap), filter, table.WithSelectedFields(col)).ToArrowRecords(ctx)
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	for rec, err := range recs {
		if err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		ds, err := dataset.Dates(rec, col)
		rec.Release()
		if err != nil {
			return nodetype.Permanent(errtype.BadInput, "%v", err)
		}
		for _, x := range ds {
			switch x {
			case d:
				facts.Rows++
			case d - 1:
				facts.PrevRows++
			}
		}
	}
	return nil
}

func (c *Checker) files(ctx context.Context, w dags.Wait) (readiness.Observation, error) {
	var matches []string
	var hasMarker func(dir string) (bool, error)
	if strings.HasPrefix(w.Files, "s3://") {
		if c.Store == nil {
			return readiness.Observation{}, objects.NoStore()
		}
		key, err := objects.StoreKey(c.Store, w.Files)
		if err != nil {
			return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for files: %v", err)
		}
		if _, err := path.Match(key, ""); err != nil {
			return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for files %s: %v", w.Files, err)
		}
		// List below the literal folder before the first glob character:
		// the markers of the matches' folders are in that listing too.
		list := key
		if i := strings.IndexAny(key, "*?["); i >= 0 {
			list = key[:strings.LastIndex(key[:i], "/")+1]
		}
		keys := map[string]bool{}
		for o, err := range c.Store.List(ctx, list) {
			if err != nil {
				return readiness.Observation{}, objects.StoreError("wait_for files: list "+w.Files, err)
			}
			keys[o.Key] = true
			if ok, _ := path.Match(key, o.Key); ok {
				matches = append(matches, o.Key)
			}
		}
		hasMarker = func(dir string) (bool, error) { return keys[path.Join(dir, w.Marker)], nil }
	} else {
		if err := c.Env.CheckPath("wait_for files", w.Files); err != nil {
			return readiness.Observation{}, err
		}
		var err error
		if matches, err = filepath.Glob(w.Files); err != nil {
			return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for files %s: %v", w.Files, err)
		}
		hasMarker = func(dir string) (bool, error) {
			_, err := os.Stat(filepath.Join(dir, w.Marker))
			if errors.Is(err, os.ErrNotExist) {
				return false, nil
			}
			return err == nil, err
		}
	}
	facts := readiness.FileFacts{Pattern: w.Files, Matches: matches, Marker: w.Marker}
	if w.Marker != "" {
		for _, dir := range readiness.MarkerFolders(matches, w.Marker) {
			ok, err := hasMarker(dir)
			if err != nil {
				return readiness.Observation{}, fmt.Errorf("wait_for files %s: marker in %s: %w", w.Files, dir, err)
			}
			if !ok {
				facts.MissingMarkers = append(facts.MissingMarkers, dir)
			}
		}
	}
	return readiness.Files(facts), nil
}

func (c *Checker) command(ctx context.Context, w dags.Wait) (readiness.Observation, error) {
	if len(w.Command) == 0 {
		return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for command is empty")
	}
	if err := process.CheckProgram(c.AllowCommands, w.Command); err != nil {
		return readiness.Observation{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.Command[0], w.Command[1:]...)
	cmd.Env = c.Env.Base()
	out := process.NewTailWriter(4096, c.logger(), "output")
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	out.Flush()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return readiness.Command(w.Command, 0, out.Tail()), nil
	case ctx.Err() != nil:
		return readiness.Observation{Saw: fmt.Sprintf("%s did not exit within %s", w.Command[0], commandTimeout)}, nil
	case errors.As(err, &exit):
		return readiness.Command(w.Command, exit.ExitCode(), out.Tail()), nil
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist), errors.Is(err, os.ErrPermission):
		return readiness.Observation{}, nodetype.Permanent(errtype.BadInput, "wait_for command: %v", err)
	}
	return readiness.Observation{}, fmt.Errorf("wait_for command %s: %w", w.Command[0], err)
}

func (c *Checker) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}
