package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	lakenode "github.com/retrain-ml/retrain/activities/lake"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/report"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/runs"
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

// ReportLinks says where a report links the run to: the Temporal Web UI
// (UIAddress "" for none) and the namespace the run is in.
type ReportLinks struct {
	UIAddress string
	Namespace string
}

// WriteRunReport renders a run's report to path: what was deployed, the
// DAG (the plan is asked of the run), the data, node timings, and what the
// nodes' outputs point at in the object store or on local disk (feature
// statistics, loss curves, metrics). Feature statistics pages are copied
// into a folder next to it (PATH without .html, plus .files) and linked
// relatively, so the report and its pages move together.
func WriteRunReport(ctx context.Context, c client.Client, store *s3store.Store, res *runs.Result, path string, links ReportLinks) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fetch := report.LocalFiles(storeFetcher(store))
	rep, opts := collectRunReport(ctx, c, fetch, res, links)
	opts.StatsPages = copyStatsPages(ctx, fetch, res, path, rep)
	var page bytes.Buffer // rendered whole first: a failure leaves no half-written file
	if err := report.Write(&page, rep, opts); err != nil {
		return fmt.Errorf("write report %s: %w", path, err)
	}
	return os.WriteFile(path, page.Bytes(), 0o644)
}

// RenderRunReport writes a run's report as HTML to w (see WriteRunReport),
// for a server: statsURL (nil: none) gives the link to a feature_stats
// node's page, which the server serves itself.
func RenderRunReport(ctx context.Context, c client.Client, store *s3store.Store, res *runs.Result, w io.Writer,
	links ReportLinks, statsURL func(node string) string) error {
	rep, opts := collectRunReport(ctx, c, report.LocalFiles(storeFetcher(store)), res, links)
	if statsURL != nil {
		opts.StatsPages = map[string]string{}
		for _, n := range res.Nodes {
			if uri, _ := n.Outputs["html_uri"].(string); n.Type == lakenode.FeatureStatsType.Name && uri != "" {
				opts.StatsPages[n.ID] = statsURL(n.ID)
			}
		}
	}
	return report.Write(w, rep, opts)
}

// collectRunReport gathers a run's report and the links it can make
// without writing anything.
func collectRunReport(ctx context.Context, c client.Client, fetch report.Fetcher, res *runs.Result, links ReportLinks) (*report.Report, report.Options) {
	var plan *dags.Plan
	if v, err := c.QueryWorkflow(ctx, res.ID, "", runs.PlanQuery); err == nil {
		var p dags.Plan
		if v.Get(&p) == nil {
			plan = &p
		}
	}
	rep := report.Collect(ctx, fetch, res, plan)
	if plan == nil {
		rep.Notes = append(rep.Notes, "the run's plan could not be queried (no worker?): the DAG is drawn without its edges")
	}
	opts := report.Options{UIBase: links.UIAddress, Namespace: links.Namespace}
	if links.UIAddress != "" {
		// The run's own execution, so the link survives a later run with
		// the same id; without it the link lists the id's executions.
		if d, err := c.DescribeWorkflowExecution(ctx, res.ID, ""); err == nil {
			opts.TemporalRunID = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		}
	}
	return rep, opts
}

// copyStatsPages copies the HTML page of each feature_stats node into
// the report's folder (see WriteRunReport) and returns the relative links
// to them. A page that cannot be copied is noted in the report and shown
// by its URI.
func copyStatsPages(ctx context.Context, fetch report.Fetcher, res *runs.Result, reportPath string, rep *report.Report) map[string]string {
	dirName := strings.TrimSuffix(filepath.Base(reportPath), ".html") + ".files"
	dir := filepath.Join(filepath.Dir(reportPath), dirName)
	pages := map[string]string{}
	for _, n := range res.Nodes {
		uri, _ := n.Outputs["html_uri"].(string)
		if n.Type != lakenode.FeatureStatsType.Name || uri == "" {
			continue
		}
		b, err := fetch.Fetch(ctx, uri)
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err == nil {
			// Node ids are [A-Za-z][A-Za-z0-9_-]*: safe as file names.
			err = os.WriteFile(filepath.Join(dir, n.ID+".html"), b, 0o644)
		}
		if err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: cannot copy the stats page %s: %v", n.ID, uri, err))
			continue
		}
		pages[n.ID] = url.PathEscape(dirName) + "/" + url.PathEscape(n.ID+".html")
	}
	return pages
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
		Short: "Write a run's HTML report: what was deployed, data windows and null rates, ROC and calibration of candidate vs baseline, DAG, timings",
		Long: `Writes a self-contained HTML page about a run (waiting for it to end if it
is still running) to --out, default DATA_DIR/reports/RUN.html, and prints
its path. At the top: the model version deployed (or why none was), the gate's
verdict, and links to the run in the Temporal Web UI (--ui-address, or the
address the namespace publishes: retrain dev publishes its own), to the
feature statistics pages (copied into RUN.files/ next to the report) and to
the model version. Then the split's date windows, row counts and per-feature
null rates, the candidate's metrics, ROC curve and reliability diagram next
to the baseline's, the gate's lift table (candidate minus baseline per
metric and per slice, against its thresholds), the DAG, node timings and
loss curves. Metrics, curves and stats are read from the object store (the
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
		app.useNamespaceUI(ctx, cmd, c)
		links := ReportLinks{UIAddress: app.UIAddress, Namespace: app.Conn.Namespace}
		if err := WriteRunReport(ctx, c, store, res, path, links); err != nil {
			return err
		}
		fmt.Fprintln(app.Out, path)
		return nil
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write (default DATA_DIR/reports/RUN.html)")
	return cmd
}
