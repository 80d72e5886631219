// Package cli holds the retrain commands that need no embedded server, so
// both the full `retrain` binary and the slim `retrain-worker` build them.
// Commands that start the dev stack live in cmd/retrain.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/temporalconn"
)

// App is the state the commands share: connection options, logging and
// where output goes.
type App struct {
	Conn      temporalconn.Options
	UIAddress string
	LogLevel  string
	Out       io.Writer
	Err       io.Writer
	// GPUs opens the host's GPUs: NVML (gpu/nvmlhost) in binaries that
	// link it, nil in the others (see package gpu, "Backends").
	GPUs gpu.Opener
}

// ExitError ends the process with Code after printing Err (if any).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

// NewRoot returns the `retrain` command with the commands that need no
// embedded server; callers add their own.
func NewRoot(app *App, use string) *cobra.Command {
	app.defaults()
	root := &cobra.Command{
		Use:           use,
		Short:         "retrain runs ML retrain -> validate -> deploy pipelines as DAGs on Temporal",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	app.AddGlobalFlags(root)
	root.AddCommand(NewRunCommand(app), NewRerunCommand(app), NewStatusCommand(app), NewDAGCommand(app), NewWorkerCommand(app))
	root.AddCommand(NewTableCommand(app), NewDataCommand(app))
	root.AddCommand(NewModelCommand(app), NewGCCommand(app))
	root.AddCommand(NewApproveCommand(app), NewRejectCommand(app), NewGPUsCommand(app), NewReportCommand(app))
	root.AddCommand(NewScheduleCommand(app))
	root.AddCommand(NewBackfillCommand(app))
	root.AddCommand(NewRunsCommand(app))
	root.AddCommand(NewWorkersCommand(app))
	return root
}

// defaults sends output to the process's stdout and stderr unless the
// caller chose writers: the commands and the logger write to them.
func (a *App) defaults() {
	if a.Out == nil {
		a.Out = os.Stdout
	}
	if a.Err == nil {
		a.Err = os.Stderr
	}
}

// AddGlobalFlags adds the connection and logging flags to cmd.
func (a *App) AddGlobalFlags(cmd *cobra.Command) {
	a.Conn.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().StringVar(&a.UIAddress, "ui-address", envOr("RETRAIN_UI_ADDRESS", "http://localhost:8233"), "Temporal Web UI base URL, for links (env RETRAIN_UI_ADDRESS)")
	cmd.PersistentFlags().StringVar(&a.LogLevel, "log-level", envOr("RETRAIN_LOG_LEVEL", "info"), "log level: debug, info, warn, error")
}

// Logger returns the process logger: text on stderr at the chosen level.
func (a *App) Logger() *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(a.LogLevel)); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(a.Err, &slog.HandlerOptions{Level: level}))
}

// RunLink is the Web UI page of a run.
func (a *App) RunLink(id, runID string) string {
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s/%s/history", strings.TrimRight(a.UIAddress, "/"), a.Conn.Namespace, id, runID)
}

// Execute runs the root command with a context cancelled on SIGINT/SIGTERM
// and exits with the command's status.
func Execute(root *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err == nil {
		return
	}
	code := 1
	var exit *ExitError
	if errors.As(err, &exit) {
		code = exit.Code
		if exit.Err == nil {
			os.Exit(code)
		}
	}
	fmt.Fprintln(os.Stderr, "retrain:", err)
	os.Exit(code)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
