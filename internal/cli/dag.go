package cli

import (
	"fmt"
	"os"

	"github.com/retrain-ml/retrain/worker"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/pipetest"
)

// NewDAGCommand returns `retrain dag`: validate and draw specs offline.
func NewDAGCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{Use: "dag", Short: "Validate, draw and look up pipeline specs and node types (no server needed)"}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE...",
		Short: "Check specs: fields, ids, needs, cycles, node types, with fields, references",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, files []string) error {
			failed := 0
			var tests *pipetest.Runner
			for _, f := range files {
				if dags.IsTestFile(f) {
					// A pipeline's test file: checked against its pipeline
					// as `retrain test` would, without running a case.
					if tests == nil {
						var err error
						if tests, err = pipetest.NewRunner(pipetest.Options{}); err != nil {
							return err
						}
					}
					s, err := tests.Load(f)
					if err != nil {
						fmt.Fprintln(app.Err, err)
						failed++
						continue
					}
					fmt.Fprintf(app.Out, "%s: ok (tests of pipeline %s, %d cases; run them with retrain test)\n", f, s.Spec.Name, len(s.File.Cases))
					continue
				}
				spec, err := LoadSpec(f)
				if err != nil {
					fmt.Fprintln(app.Err, err)
					failed++
					continue
				}
				fmt.Fprintf(app.Out, "%s: ok (pipeline %s, %d nodes)\n", f, spec.Name, len(spec.Nodes))
			}
			if failed > 0 {
				return &ExitError{Code: 1, Err: fmt.Errorf("%d of %d specs invalid", failed, len(files))}
			}
			return nil
		},
	})
	var format string
	graph := &cobra.Command{
		Use:   "graph FILE",
		Short: "Print the DAG as Mermaid or Graphviz dot",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			spec, err := LoadSpec(args[0])
			if err != nil {
				return err
			}
			switch format {
			case "mermaid":
				fmt.Fprint(app.Out, spec.Mermaid())
			case "dot":
				fmt.Fprint(app.Out, spec.Dot())
			default:
				return fmt.Errorf("unknown --format %q: use mermaid or dot", format)
			}
			return nil
		},
	}
	graph.Flags().StringVar(&format, "format", "mermaid", "mermaid or dot")
	cmd.AddCommand(graph, newTypesCommand(app))
	return cmd
}

// LoadSpec reads, parses and validates a spec file against the built-in
// node types.
func LoadSpec(file string) (*dags.Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	spec, err := dags.Parse(file, data)
	if err != nil {
		return nil, err
	}
	if err := spec.Validate(worker.Types()); err != nil {
		return nil, err
	}
	return spec, nil
}
