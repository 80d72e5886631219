package main

import (
	"context"
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/client"

	"github.com/retrain-ml/retrain/dags/examples"
	"github.com/retrain-ml/retrain/devstack"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/worker"
	"github.com/retrain-ml/retrain/workflows"
)

// localStack is the embedded server, a client and a worker in this process.
type localStack struct {
	server *devstack.Server
	client client.Client
	worker *worker.Worker
}

// startLocal starts the dev stack and a worker polling it. The worker knows
// the embedded example pipelines unless cfg names a folder.
func startLocal(ctx context.Context, app *cli.App, opts devstack.Options, cfg worker.Config, log *slog.Logger) (*localStack, error) {
	opts.SearchAttributes = workflows.SearchAttributes()
	opts.Logger = log
	srv, err := devstack.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("start dev stack: %w", err)
	}
	s := &localStack{server: srv}
	app.Conn.Address, app.Conn.Namespace = srv.FrontendAddress(), srv.Namespace()
	if srv.UIAddress() != "" {
		app.UIAddress = srv.UIAddress()
	}
	if s.client, err = app.Conn.Dial(ctx, log.With("component", "client")); err != nil {
		s.close()
		return nil, err
	}
	if cfg.PipelinesDir == "" {
		cfg.Pipelines = examples.FS
	}
	if !cfg.Lake.Configured() {
		cfg.Lake.DataDir = opts.DataDir // the lake lives with the stack: DATA/catalog.db, DATA/warehouse
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
	if err := s.server.Stop(); err != nil {
		slog.Warn("stop dev stack", "error", err)
	}
}
