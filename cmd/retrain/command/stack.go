package command

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/devstack"
	"github.com/retrain-ml/retrain/internal/devkit/devstack/s3server"
	"github.com/retrain-ml/retrain/internal/storage"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// localStack is the embedded server, a client and a worker in this process,
// and the S3 server in a child process.
type localStack struct {
	server *devstack.Server
	s3     *s3server.Server // nil when the worker uses an S3 of its own (--s3-uri)
	client client.Client
	worker *worker.Worker
	store  storage.Config // the worker's object store
}

// startLocal starts the dev stack and a worker polling it. The worker knows
// the embedded example pipelines unless cfg names a folder, and keeps
// checkpoints and models in the stack's S3 server (on s3Port, 0 for any)
// unless cfg names an S3 store.
func startLocal(ctx context.Context, app *cli.App, opts devstack.Options, s3Port int, cfg worker.Config, log *slog.Logger) (*localStack, error) {
	// The embedded server is CPU-bound on small machines and allocates
	// heavily; a larger GC target cuts its CPU per step by about a tenth.
	// Only when the user has not chosen one.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// GOGC 400 lets the heap grow to 5x what is live: a 20M-row ctr-retrain
	// peaked at 4.5 GB RSS with at most 0.9 GB live (measured with gctrace). A soft
	// limit of 1 GiB per P (at least 2 GiB) makes the GC run sooner on big
	// steps only; small runs keep the larger target.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(max(2, runtime.GOMAXPROCS(0))) << 30)
	}
	opts.SearchAttributes = runs.SearchAttributes()
	opts.Logger = log
	srv, err := devstack.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("start dev stack: %w", err)
	}
	s := &localStack{server: srv}
	if cfg.Store.S3.URI == "" {
		if s.s3, err = s3server.Start(ctx, s3server.Options{DataDir: opts.DataDir, Port: s3Port, Logger: log.With("component", "s3")}); err != nil {
			s.close()
			return nil, fmt.Errorf("start dev stack S3 server: %w", err)
		}
		cfg.Store = storage.Config{S3: s.s3.StoreConfig(""), RetentionDays: cfg.Store.RetentionDays}
	}
	app.Conn.Address, app.Conn.Namespace = srv.FrontendAddress(), srv.Namespace()
	if srv.UIAddress() != "" {
		app.UIAddress = srv.UIAddress()
	}
	if s.client, err = app.Conn.Dial(ctx, log.With("component", "client")); err != nil {
		s.close()
		return nil, err
	}
	// `retrain run` reads it back to link to the UI on its real port.
	if err := runs.PublishUIAddress(ctx, s.client, srv.Namespace(), srv.UIAddress()); err != nil {
		log.Warn("Web UI links from `retrain run` will use --ui-address", "error", err)
	}
	if cfg.PipelinesDir == "" {
		cfg.Pipelines = examples.FS
	}
	s.store = cfg.Store
	if cfg.Lake.DataDir == "" {
		// The lake lives with the stack: DATA/catalog.db, DATA/warehouse,
		// or what of them --catalog-uri and --warehouse leave unset (a
		// PostgreSQL catalog without --warehouse keeps its files in
		// DATA/warehouse).
		cfg.Lake.DataDir = opts.DataDir
	}
	if s.worker, err = worker.New(ctx, s.client, srv.Namespace(), cfg, log.With("component", "worker")); err != nil {
		s.close()
		return nil, err
	}
	if err := s.worker.Start(); err != nil {
		s.worker = nil
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *localStack) close() {
	if s.worker != nil {
		s.worker.Stop()
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.s3 != nil {
		if err := s.s3.Stop(); err != nil {
			slog.Warn("stop dev stack S3 server", "error", err)
		}
	}
	if err := s.server.Stop(); err != nil {
		slog.Warn("stop dev stack", "error", err)
	}
}
