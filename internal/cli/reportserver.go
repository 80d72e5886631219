package cli

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	lakenode "github.com/retrain-ml/retrain/activities/lake"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/internal/report"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/runs"
)

// ReportURLPath is the path the report server serves a run's report on;
// {run} stands for the run id (a worker's --report-url uses the same
// placeholder).
const ReportURLPath = "/runs/{run}"

// ReportHandler serves runs' HTML reports: GET /runs/RUN renders RUN's
// report on demand from the run's state at that moment, so a running run
// shows its progress so far and a reload shows more; GET /stats/NODE/RUN
// serves the page of RUN's feature_stats node NODE, which the report links
// to. store may be nil (the report then leaves out what lives in the
// object store). links say where the Web UI is, for links to the run.
func ReportHandler(c client.Client, store *s3store.Store, links ReportLinks, logger *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	fetch := report.LocalFiles(storeFetcher(store))
	// withRun looks the request's run up (404 when there is none) and
	// hands its state to serve.
	withRun := func(serve func(ctx context.Context, w http.ResponseWriter, r *http.Request, res *runs.Result)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("run")
			ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
			defer cancel()
			res, err := runs.State(ctx, c, id)
			if err != nil {
				serveRunError(w, logger, id, err)
				return
			}
			serve(ctx, w, r, res)
		}
	}
	mux.HandleFunc("GET /stats/{node}/{run...}", withRun(func(ctx context.Context, w http.ResponseWriter, r *http.Request, res *runs.Result) {
		id, node := r.PathValue("run"), r.PathValue("node")
		uri := ""
		for _, n := range res.Nodes {
			if n.ID == node && n.Type == lakenode.FeatureStatsType.Name {
				uri, _ = n.Outputs["html_uri"].(string)
			}
		}
		if uri == "" {
			http.Error(w, "run "+id+" has no statistics page of a node "+node, http.StatusNotFound)
			return
		}
		page, err := fetch.Fetch(ctx, uri)
		if err != nil {
			logger.Warn("report: stats page", "run", id, "node", node, "error", err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		writeHTML(w, page)
	}))
	mux.HandleFunc("GET /runs/{run...}", withRun(func(ctx context.Context, w http.ResponseWriter, r *http.Request, res *runs.Result) {
		id := r.PathValue("run")
		statsURL := func(node string) string {
			return "/stats/" + url.PathEscape(node) + "/" + url.PathEscape(id)
		}
		var page bytes.Buffer // rendered whole first, so a failure is a clean 500
		if err := RenderRunReport(ctx, c, store, res, &page, links, statsURL); err != nil {
			logger.Warn("report: render", "run", id, "error", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeHTML(w, page.Bytes())
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "retrain run reports: GET /runs/RUN", http.StatusNotFound)
	})
	return mux
}

// serveRunError answers a failed look-up of a run.
func serveRunError(w http.ResponseWriter, logger *slog.Logger, id string, err error) {
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		http.Error(w, "no run "+id, http.StatusNotFound)
		return
	}
	logger.Warn("report: run state", "run", id, "error", err)
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// writeHTML sends a page of the report server.
func writeHTML(w http.ResponseWriter, page []byte) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// Reports and stats pages have no scripts and no remote assets; keep
	// it so.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(page)
}

// ReportServer is a running report server.
type ReportServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// ListenReports opens the report server's listener on addr (host:port,
// port 0 for a free one), before the workers that link to it start.
func ListenReports(addr string) (net.Listener, error) {
	return net.Listen("tcp", addr)
}

// ServeReports serves ReportHandler on ln until Stop.
func ServeReports(ln net.Listener, c client.Client, store *s3store.Store, links ReportLinks, logger *slog.Logger) *ReportServer {
	s := &ReportServer{
		srv: &http.Server{
			Handler:           ReportHandler(c, store, links, logger),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("report server stopped", "error", err)
		}
	}()
	return s
}

// URL is the report URL template workers get: http://host:port/runs/{run}.
func (s *ReportServer) URL() string { return ReportURLTemplate(s.ln.Addr().String()) }

// ReportURLTemplate is the report URL template for a server on addr.
func ReportURLTemplate(addr string) string { return "http://" + addr + ReportURLPath }

// Stop closes the listener and waits (bounded) for requests in flight.
func (s *ReportServer) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}
