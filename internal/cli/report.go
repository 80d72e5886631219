package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/report"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/s3store"
	"github.com/retrain-ml/retrain/workflows"
)

// ReportPath is where a run's HTML report goes under a data dir.
func ReportPath(dataDir, runID string) string {
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == ':' || r < ' ' {
			return '_'
		}
		return r
	}, runID)
	return filepath.Join(dataDir, "reports", name+".html")
}

// WriteRunReport renders a run's report to path: the DAG (the plan is
// asked of the run), node timings, and what the nodes' outputs point at
// in the object store or on local disk (feature statistics, loss curves,
// metrics).
func WriteRunReport(ctx context.Context, c client.Client, store *s3store.Store, res *workflows.Result, path string) error {
	var plan *dags.Plan
	if v, err := c.QueryWorkflow(ctx, res.ID, "", workflows.PlanQuery); err == nil {
		var p dags.Plan
		if v.Get(&p) == nil {
			plan = &p
		}
	}
	rep := report.Collect(ctx, report.LocalFiles(storeFetcher(store)), res, plan)
	if plan == nil {
		rep.Notes = append(rep.Notes, "the run's plan could not be queried (no worker?): the DAG is drawn without its edges")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := report.Write(f, rep); err != nil {
		f.Close()
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return f.Close()
}

// storeFetcher reads s3:// URIs of the store.
func storeFetcher(store *s3store.Store) report.Fetcher {
	return report.FetchFunc(func(ctx context.Context, uri string) ([]byte, error) {
		if store == nil {
			return nil, fmt.Errorf("no object store to read %s from", uri)
		}
		u, err := s3store.ParseURI(uri)
		if err != nil {
			return nil, err
		}
		root := store.URI()
		prefix := strings.TrimSuffix(root.Key, "/")
		if prefix != "" {
			prefix += "/"
		}
		if u.Bucket != root.Bucket || !strings.HasPrefix(u.Key, prefix) {
			return nil, fmt.Errorf("%s is outside the object store %s", uri, root)
		}
		b, _, err := store.GetBytes(ctx, strings.TrimPrefix(u.Key, prefix))
		return b, err
	})
}

// NewReportCommand returns `retrain report`: a run's HTML report.
func NewReportCommand(app *App) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report RUN",
		Short: "Write a run's HTML report: DAG, node timings, feature statistics, loss curves, candidate vs baseline metrics",
		Long: `Writes a self-contained HTML page about a run (waiting for it to end if it
is still running) to --out, default DATA_DIR/reports/RUN.html, and prints
its path. Loss curves and metrics are read from the object store (the
worker's: --s3-uri, or the dev stack's under --data-dir).`,
		Args: cobra.ExactArgs(1),
	}
	open := storeFlags(app, cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		c, err := app.Conn.Dial(ctx, app.Logger())
		if err != nil {
			return err
		}
		defer c.Close()
		res, err := runs.Wait(ctx, c, args[0], nil)
		if err != nil {
			return err
		}
		store, err := open(cmd)
		if err != nil {
			app.Logger().Warn("no object store: the report leaves out loss curves and metrics", "error", err)
			store = nil
		}
		path := out
		if path == "" {
			dir, _ := cmd.Flags().GetString("data-dir")
			path = ReportPath(dir, res.ID)
		}
		if err := WriteRunReport(ctx, c, store, res, path); err != nil {
			return err
		}
		fmt.Fprintln(app.Out, path)
		return nil
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write (default DATA_DIR/reports/RUN.html)")
	return cmd
}
