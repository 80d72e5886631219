package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/models"
)

// newModelDiffCommand returns `retrain model diff NAME A B`.
func newModelDiffCommand(app *App, registry func(*cobra.Command) (*models.Registry, error), asJSON *bool) *cobra.Command {
	return &cobra.Command{
		Use:   "diff NAME A B",
		Short: "Show what differs between two versions: run, spec, params, data snapshots, upstream nodes, files, metrics",
		Long: `diff compares what versions A and B of model NAME were made of, as each recorded
when its run registered it: the run and the date it trained for, the spec's digest, the
retrain release, the params, the data snapshots, the upstream nodes (their content keys
where the run knew them, and which results both share), the artifact files and the
metrics. A version registered by hand, or by a run from before provenance was recorded,
has no spec, params or upstream nodes: those are listed as unknown. A and B are
versions or aliases (v3, production).`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			a, err := reg.Resolve(ctx, args[0]+"@"+args[1])
			if err != nil {
				return err
			}
			b, err := reg.Resolve(ctx, args[0]+"@"+args[2])
			if err != nil {
				return err
			}
			d := models.Diff(a, b)
			if *asJSON {
				return printJSON(app, d)
			}
			printDiff(app.Out, d)
			return nil
		},
	}
}

func printDiff(out io.Writer, d models.VersionDiff) {
	fmt.Fprintf(out, "%s -> %s\n", d.A, d.B)
	if len(d.Differences) == 0 {
		fmt.Fprintln(out, "  nothing differs")
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	last := ""
	for _, x := range d.Differences {
		field := x.Field
		if field == last {
			field = ""
		}
		last = x.Field
		fmt.Fprintf(w, "  %s\t%s\n", field, x.Text)
	}
	_ = w.Flush()
	if len(d.Shared) > 0 {
		fmt.Fprintf(out, "made from the same results (computed once, in the same run): %s\n", strings.Join(d.Shared, ", "))
	}
	if len(d.Same) > 0 {
		fmt.Fprintf(out, "same: %s\n", strings.Join(d.Same, ", "))
	}
	if len(d.Unknown) > 0 {
		fmt.Fprintf(out, "not recorded: %s\n", strings.Join(d.Unknown, ", "))
	}
}

// printProvenance adds a version's provenance to `model show`.
func printProvenance(w io.Writer, p *models.Provenance) {
	if p == nil {
		return
	}
	if p.Pipeline != "" {
		fmt.Fprintf(w, "pipeline\t%s (node %s)\n", p.Pipeline, cmp.Or(p.Node, "-"))
	}
	if p.SpecDigest != "" {
		fmt.Fprintf(w, "spec\t%s\n", p.SpecDigest)
	}
	if p.Retrain != "" {
		fmt.Fprintf(w, "retrain\t%s\n", p.Retrain)
	}
	if len(p.Params) > 0 {
		var pairs []string
		for _, k := range slices.Sorted(maps.Keys(p.Params)) {
			b, _ := json.Marshal(p.Params[k])
			pairs = append(pairs, k+"="+string(b))
		}
		fmt.Fprintf(w, "params\t%s\n", strings.Join(pairs, " "))
	}
	if p.Trainer != "" {
		fmt.Fprintf(w, "trained by\tnode %s%s\n", p.Trainer, keyNote(p.TrainKey))
	}
	for _, o := range p.Upstream {
		fmt.Fprintf(w, "upstream\t%s (%s) from run %s%s\n", o.Node, o.Type, o.Run, keyNote(o.Key))
	}
}

func keyNote(key string) string {
	if key == "" {
		return ""
	}
	return ", key " + key
}

// listTrainedOn prints the versions, of every model or of the one named,
// that record table@id among their data snapshots.
func listTrainedOn(ctx context.Context, app *App, reg *models.Registry, spec string, args []string, asJSON bool) error {
	table, id, err := models.ParseTableSnapshot(spec)
	if err != nil {
		return fmt.Errorf("--trained-on %w", err)
	}
	names := args
	if len(names) == 0 {
		if names, err = reg.Models(ctx); err != nil {
			return err
		}
	}
	var found []models.Version
	for _, name := range names {
		versions, err := reg.List(ctx, name)
		if err != nil {
			return fmt.Errorf("versions of %s: %w", name, err)
		}
		for _, v := range versions {
			if models.TrainedOn(v, table, id) {
				found = append(found, v)
			}
		}
	}
	if asJSON {
		return printJSON(app, struct {
			Versions []models.Version `json:"versions"`
		}{found})
	}
	if len(found) == 0 {
		fmt.Fprintf(app.Out, "no version records snapshot %s\n", spec)
		return nil
	}
	w := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "VERSION\tCREATED\tTRAINED FOR\tRUN\tDATA")
	for _, v := range found {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", v.Ref(), v.Created.Local().Format(time.DateTime), cmp.Or(v.LogicalDate(), "-"),
			cmp.Or(v.PipelineRun, "-"), strings.Join(v.DataSnapshots, ", "))
	}
	return w.Flush()
}
