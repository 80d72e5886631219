package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/storage"
)

// storeFlags adds the object store flags (the same the worker takes, plus
// --data-dir) to a command and its subcommands, and returns a function
// that opens the store they name. The commands print what they did, so
// the store and registry log only warnings unless --log-level says
// otherwise.
func storeFlags(app *App, cmd *cobra.Command) func(*cobra.Command) (*s3store.Store, error) {
	var cfg storage.Config
	cfg.AddFlags(cmd.PersistentFlags())
	cfg.AddDataDirFlag(cmd.PersistentFlags())
	return func(cmd *cobra.Command) (*s3store.Store, error) {
		if f := cmd.Flag("log-level"); f != nil && !f.Changed {
			app.LogLevel = "warn"
		}
		return storage.Open(cmd.Context(), cfg, app.Logger())
	}
}

// NewModelCommand returns `retrain model`: the model registry.
func NewModelCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Register models, list and inspect versions, move the production alias and see its history",
		Long: `Models live in the object store under models/NAME/: immutable versions and aliases
(production by default) that move only by compare-and-swap, each move recorded in
the alias history. The store is the worker's: --s3-uri for S3, or the dev stack's
S3 server under --data-dir.`,
	}
	open := storeFlags(app, cmd)
	registry := func(cmd *cobra.Command) (*models.Registry, error) {
		st, err := open(cmd)
		if err != nil {
			return nil, err
		}
		return models.New(st), nil
	}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	var sf servingFlags
	sf.add(cmd)
	var alias, reason string
	var force bool
	aliasFlags := func(c *cobra.Command) {
		c.Flags().StringVar(&alias, "alias", models.DefaultAlias, "alias")
		c.Flags().StringVar(&reason, "reason", "", "why, recorded in the alias history")
	}

	var (
		version string
		metrics map[string]string
		labels  map[string]string
	)
	register := &cobra.Command{
		Use:   "register NAME DIR",
		Short: "Register the files under DIR as a new version of model NAME (the same files again return the existing version)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			meta := models.Meta{Labels: labels}
			for k, v := range metrics {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("--metric %s=%s: not a number", k, v)
				}
				if meta.Metrics == nil {
					meta.Metrics = map[string]float64{}
				}
				meta.Metrics[k] = f
			}
			artifacts, err := models.DirArtifacts(args[1])
			if err != nil {
				return err
			}
			if len(artifacts) == 0 {
				return fmt.Errorf("%s holds no files", args[1])
			}
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			v, err := reg.Register(cmd.Context(), args[0], artifacts, version, meta)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(app, v)
			}
			fmt.Fprintf(app.Out, "registered %s (%d files, %s)\n", v.Ref(), len(v.Files), v.Checksum)
			return nil
		},
	}
	register.Flags().StringVar(&version, "version", "", "version name (default: the next vN)")
	register.Flags().StringToStringVar(&metrics, "metric", nil, "metric name=value to record (repeatable)")
	register.Flags().StringToStringVar(&labels, "label", nil, "label key=value to record (repeatable)")

	var trainedOn string
	list := &cobra.Command{
		Use:   "list NAME | list [NAME] --trained-on TABLE@SNAPSHOT",
		Short: "List the versions of a model, oldest first, with the aliases that name them (--trained-on: the versions, of every model or NAME, that trained on a snapshot)",
		Args:  cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if trainedOn == "" && len(args) == 0 {
				return fmt.Errorf("model list: name the model, or give --trained-on TABLE@SNAPSHOT")
			}
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			if trainedOn != "" {
				return listTrainedOn(ctx, app, reg, trainedOn, args, asJSON)
			}
			versions, err := reg.List(ctx, args[0])
			if err != nil {
				return err
			}
			aliases, err := reg.Aliases(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(app, struct {
					Versions []models.Version `json:"versions"`
					Aliases  []models.Alias   `json:"aliases"`
				}{versions, aliases})
			}
			if len(versions) == 0 {
				return fmt.Errorf("%w: model %s has no versions", models.ErrNotFound, args[0])
			}
			byVersion := map[string][]string{}
			for _, a := range aliases {
				byVersion[a.Version] = append(byVersion[a.Version], a.Alias)
			}
			w := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "VERSION\tCREATED\tTRAINED FOR\tFILES\tMETRICS\tALIASES\tCHECKSUM")
			for _, v := range versions {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", v.Version, v.Created.Local().Format(time.DateTime), cmp.Or(v.LogicalDate(), "-"),
					len(v.Files), formatMetrics(v.Metrics), strings.Join(byVersion[v.Version], ","), shortChecksum(v.Checksum))
			}
			return w.Flush()
		},
	}

	list.Flags().StringVar(&trainedOn, "trained-on", "", "only the versions that trained on this table snapshot, TABLE@SNAPSHOT_ID (as their data_snapshots record)")

	show := &cobra.Command{
		Use:   "show NAME[@VERSION|@ALIAS]",
		Short: "Show a version: by name, by alias, or NAME alone for its production version",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			v, err := reg.Resolve(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(app, v)
			}
			w := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "model\t%s\n", v.Name)
			fmt.Fprintf(w, "version\t%s\n", v.Version)
			fmt.Fprintf(w, "created\t%s\n", v.Created.Local().Format(time.RFC3339))
			fmt.Fprintf(w, "checksum\t%s\n", v.Checksum)
			fmt.Fprintf(w, "location\t%s\n", reg.URI(v))
			if d := v.LogicalDate(); d != "" {
				fmt.Fprintf(w, "trained for\t%s (the run's logical date)\n", d)
			}
			if v.PipelineRun != "" {
				fmt.Fprintf(w, "pipeline run\t%s\n", v.PipelineRun)
			}
			if len(v.Metrics) > 0 {
				fmt.Fprintf(w, "metrics\t%s\n", formatMetrics(v.Metrics))
			}
			if len(v.DataSnapshots) > 0 {
				fmt.Fprintf(w, "data\t%s\n", strings.Join(v.DataSnapshots, ", "))
			}
			printProvenance(w, v.Provenance)
			for _, k := range slices.Sorted(maps.Keys(v.Labels)) {
				fmt.Fprintf(w, "label\t%s=%s\n", k, v.Labels[k])
			}
			for _, f := range v.Files {
				fmt.Fprintf(w, "file\t%s (%d bytes)\n", f.Path, f.Size)
			}
			return w.Flush()
		},
	}

	history := &cobra.Command{
		Use:   "history NAME",
		Short: "Show every move of an alias, oldest first: when, from and to which version, by whom and why",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			moves, err := reg.History(ctx, args[0], alias)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(app, moves)
			}
			if len(moves) == 0 {
				return fmt.Errorf("%w: %s of %s has never been set", models.ErrNotFound, alias, args[0])
			}
			w := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SEQ\tTIME\tKIND\tFROM\tTO\tBY\tRUN\tSERVING\tREASON")
			for _, m := range moves {
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Seq, m.Time.Local().Format(time.DateTime), kindOf(m),
					cmp.Or(m.From, "-"), m.To, m.Actor.Name, cmp.Or(m.Actor.Run, "-"), servingColumn(m), m.Reason)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			printDeliveries(app, moves)
			return nil
		},
	}
	history.Flags().StringVar(&alias, "alias", models.DefaultAlias, "alias")

	promote := &cobra.Command{
		Use:   "promote NAME VERSION",
		Short: "Point the alias (production) at VERSION, and tell the model's webhooks (exit status 3 if one was not told: the move stands)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			m, err := moveAlias(cmd.Context(), reg, models.MoveRequest{Model: args[0], Alias: alias, To: args[1],
				Force: force, By: cliActor(), Reason: reason})
			if err != nil {
				return err
			}
			return sf.announce(cmd.Context(), app, reg, m, asJSON)
		},
	}
	aliasFlags(promote)
	forceFlag(promote, &force)

	rollback := &cobra.Command{
		Use:   "rollback NAME",
		Short: "Point the alias (production) back at the version it named before its latest move, and tell the model's webhooks (exit status 3 if one was not told)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := registry(cmd)
			if err != nil {
				return err
			}
			m, err := moveAlias(cmd.Context(), reg, models.MoveRequest{Model: args[0], Alias: alias, Kind: models.KindRollback,
				Force: force, By: cliActor(), Reason: reason})
			if err != nil {
				return err
			}
			return sf.announce(cmd.Context(), app, reg, m, asJSON)
		},
	}
	aliasFlags(rollback)
	forceFlag(rollback, &force)

	cmd.AddCommand(register, list, show, history, promote, rollback, newModelDiffCommand(app, registry, &asJSON))
	cmd.AddCommand(newWebhooksCommand(app, registry, &asJSON), newNotifyCommand(app, registry, &sf, &asJSON))
	return cmd
}

// NewGCCommand returns `retrain gc`: delete old checkpoints.
func NewGCCommand(app *App) *cobra.Command {
	var olderThan string
	cmd := &cobra.Command{
		Use:   "gc --older-than 7d",
		Short: "Delete checkpoints older than an age, complete or not, and abort stale uploads",
		Long: `Checkpoints are short-lived: a retried or resumed step reads them back within hours.
gc deletes those older than --older-than (a complete checkpoint by its manifest's
age; files of crashed attempts by their newest file), for stores whose server does
not expire them with a lifecycle rule (versitygw, the dev stack's server, has none).`,
		Args: cobra.NoArgs,
	}
	open := storeFlags(app, cmd)
	cmd.Flags().StringVar(&olderThan, "older-than", "", "age, e.g. 7d or 36h")
	_ = cmd.MarkFlagRequired("older-than")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		age, err := dags.ParseDuration(olderThan)
		if err != nil {
			return fmt.Errorf("--older-than: %w", err)
		}
		st, err := open(cmd)
		if err != nil {
			return err
		}
		report, err := checkpoint.GC(cmd.Context(), st, age)
		fmt.Fprintf(app.Out, "checkpoints: %d complete, %d incomplete found\n", report.Complete, report.Incomplete)
		fmt.Fprintf(app.Out, "deleted: %d complete, %d incomplete, %d stale attempts (%d objects, %d bytes); %d uploads aborted\n",
			report.DeletedComplete, report.DeletedIncomplete, report.DeletedAttempts, report.DeletedObjects, report.DeletedBytes, report.AbortedUploads)
		return err
	}
	return cmd
}

// cliActor is who moves an alias from the command line.
func cliActor() models.Actor {
	name := "cli"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil {
		name += "@" + host
	}
	return models.Actor{Name: name}
}

func printMove(app *App, m models.Move, asJSON bool) error {
	if asJSON {
		return printJSON(app, struct {
			models.Move
			Changed bool `json:"changed"`
		}{m, m.Changed})
	}
	if !m.Changed {
		fmt.Fprintf(app.Out, "%s of %s already names %s (move #%d)\n", m.Alias, m.Model, m.To, m.Seq)
		return nil
	}
	fmt.Fprintf(app.Out, "%s of %s: %s -> %s (%s, move #%d)\n", m.Alias, m.Model, cmp.Or(m.From, "(none)"), m.To, kindOf(m), m.Seq)
	return nil
}

func printJSON(app *App, v any) error {
	enc := json.NewEncoder(app.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func formatMetrics(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+strconv.FormatFloat(m[k], 'g', 6, 64))
	}
	return strings.Join(parts, ",")
}

func shortChecksum(s string) string {
	if len(s) > 19 {
		return s[:19]
	}
	return s
}
