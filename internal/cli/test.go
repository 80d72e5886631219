package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/pipetest"
	"github.com/retrain-ml/retrain/worker"
)

// NewTestCommand returns `retrain test`: run pipelines' test cases with
// stubbed nodes and skipped time, no server needed.
func NewTestCommand(app *App) *cobra.Command {
	var (
		junit   string
		opts    pipetest.Options
		verbose bool
	)
	if v := os.Getenv(worker.EnvAllowCommands); v != "" {
		opts.AllowCommands = strings.Split(v, ",")
	}
	cmd := &cobra.Command{
		Use:   "test [PATH]...",
		Short: "Run pipelines' test cases (PIPELINE.test.yaml) on stubbed nodes with skipped time; no server needed",
		Long: `Run the test cases of pipelines: each NAME.test.yaml (under PATH, a file or a folder searched
recursively; default .) tests the pipeline NAME.yaml beside it. Each case runs the real Pipeline
workflow, and its gate, canary and foreach child workflows, in Temporal's test environment, where
retry backoffs, approval waits and canary bakes take no time. Every node is answered by its stub
(outputs, an error, a sequence per attempt); command, noop and gate nodes may run for real
(run: true). A node without a stub fails its case. See docs/testing-pipelines.md.

Prints a line per case; a failed case's mismatches and its nodes, expected against actual.
Exits 1 when a case fails or a test file is invalid.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"."}
			}
			files, err := pipetest.Find(args)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			if len(files) == 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("no test files (NAME%s) under %s", ".test.yaml", strings.Join(args, ", "))}
			}
			if verbose {
				opts.Logger = app.Logger()
			} else {
				opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			}
			r, err := pipetest.NewRunner(opts)
			if err != nil {
				return err
			}
			rep := r.RunFiles(cmd.Context(), files, app.Out)
			pipetest.PrintSummary(app.Out, rep)
			if junit != "" {
				if err := writeJUnit(junit, rep); err != nil {
					return err
				}
			}
			if rep.Failed() > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&junit, "junit", "", "also write the results to `FILE` as JUnit XML, for CI")
	f.StringSliceVar(&opts.AllowCommands, "allow-commands", opts.AllowCommands,
		"programs command nodes that run for real (run: true) may start, as a worker's --allow-commands; empty: any (env "+worker.EnvAllowCommands+")")
	f.StringSliceVar(&opts.Env.PassEnv, "pass-env", nil, "environment variables those programs get, as a worker's --pass-env")
	f.DurationVar(&opts.WallTimeout, "case-timeout", pipetest.DefaultWallTimeout, "wall-clock limit of one case (a real command that hangs); a case's own timeout: bounds its run's skipped time")
	f.BoolVarP(&verbose, "verbose", "v", false, "show the workflows' and nodes' logs")
	return cmd
}

func writeJUnit(path string, rep *pipetest.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	if err := pipetest.WriteJUnit(f, rep); err != nil {
		f.Close()
		return fmt.Errorf("--junit %s: %w", path, err)
	}
	return f.Close()
}
