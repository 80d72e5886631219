// Command customnode is a team's own retrain worker: the built-in node types
// plus one of the team's, http_check (package httpcheck), registered with
// worker.WithNodeTypes. It polls a task queue of its own ("customnode" by
// default) so that workers without http_check never pick up its runs.
//
//	customnode [worker flags]        run the worker (the flags of `retrain worker`)
//	customnode validate FILE...      check specs against the built-in and this binary's types
//
// It knows the pipelines in pipelines/ (embedded) unless --pipelines names
// a folder.
package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/examples/customnode/httpcheck"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/temporalconn"
	"github.com/retrain-ml/retrain/worker"
)

// defaultQueue is this worker's task queue: not `retrain`, whose workers
// do not know http_check.
const defaultQueue = "customnode"

//go:embed pipelines/*.yaml
var embedded embed.FS

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "customnode:", err)
		os.Exit(1)
	}
}

// nodeTypes are this binary's own node types: the one list both the worker
// and validate use, so they never disagree.
func nodeTypes() []nodetype.Type {
	return []nodetype.Type{httpcheck.Type(nil)}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "validate" {
		return validate(args[1:], stdout, stderr)
	}
	return runWorker(ctx, args, stderr)
}

func runWorker(ctx context.Context, args []string, stderr io.Writer) error {
	flags := pflag.NewFlagSet("customnode", pflag.ContinueOnError)
	flags.SetOutput(stderr)
	var (
		conn temporalconn.Options
		cfg  worker.Config
	)
	conn.AddFlags(flags)
	cfg.AddFlags(flags)
	cfg.Lake.AddDataDirFlag(flags)
	cfg.Store.AddDataDirFlag(flags) // shares the lake's --data-dir
	queue := flags.Lookup("task-queue")
	queue.DefValue = defaultQueue
	if err := queue.Value.Set(defaultQueue); err != nil {
		return err
	}
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q; did you mean `customnode validate FILE...`?", flags.Args())
	}
	if cfg.PipelinesDir == "" {
		sub, err := fs.Sub(embedded, "pipelines")
		if err != nil {
			return err
		}
		cfg.Pipelines = sub
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	c, err := conn.Dial(ctx, log)
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := worker.New(ctx, c, conn.Namespace, cfg, log, worker.WithNodeTypes(nodeTypes()...))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "worker polling %s on %s (namespace %s), with node type %s\n", cfg.TaskQueue, conn.Address, conn.Namespace, httpcheck.Name)
	return w.Run(ctx)
}

// validate checks spec files as this binary's worker will: `retrain dag
// validate` does not know http_check.
func validate(files []string, stdout, stderr io.Writer) error {
	if len(files) == 0 {
		return errors.New("validate: name at least one spec file")
	}
	reg, err := worker.Registry(nodeTypes()...)
	if err != nil {
		return err
	}
	failed := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil {
			var spec *dags.Spec
			if spec, err = dags.Load(f, data, reg); err == nil {
				fmt.Fprintf(stdout, "%s: ok (pipeline %s, %d nodes)\n", f, spec.Name, len(spec.Nodes))
				continue
			}
		}
		fmt.Fprintln(stderr, err)
		failed++
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d specs invalid", failed, len(files))
	}
	return nil
}
