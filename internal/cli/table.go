package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"
	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/storage"
)

// lakeFlags adds the lake configuration flags (the same the worker takes,
// plus --data-dir) to a command and its subcommands.
func lakeFlags(cmd *cobra.Command) *lake.Config {
	var cfg lake.Config
	cfg.AddFlags(cmd.PersistentFlags())
	cfg.AddDataDirFlag(cmd.PersistentFlags())
	return &cfg
}

// NewTableCommand returns `retrain table`: look at and roll back lake
// tables.
func NewTableCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{Use: "table", Short: "Inspect Iceberg tables of the lake, roll them back and maintain them"}
	cfg := lakeFlags(cmd)
	// The model registry, which `table maintain` reads for the snapshots
	// model versions trained on; its S3 endpoint and region flags are
	// the lake's (see storage.Config.AddFlags).
	var store storage.Config
	store.AddFlags(cmd.PersistentFlags())
	store.AddDataDirFlag(cmd.PersistentFlags())

	var asJSON bool
	snapshots := &cobra.Command{
		Use:   "snapshots TABLE",
		Short: "List a table's snapshots, oldest first (* marks main's head)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cat, err := lake.Open(cmd.Context(), *cfg, app.Logger())
			if err != nil {
				return err
			}
			defer cat.Close()
			tbl, err := cat.Load(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			snaps := lake.Snapshots(tbl)
			if asJSON {
				enc := json.NewEncoder(app.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(snaps)
			}
			w := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "\tSNAPSHOT\tPARENT\tTIME\tOPERATION\tROWS\tCHANGE")
			for _, s := range snaps {
				mark := ""
				switch {
				case s.Current:
					mark = "*"
				case !s.OnMain:
					mark = "-" // not reachable from main (rolled back)
				}
				parent := ""
				if s.ParentID != nil {
					parent = strconv.FormatInt(*s.ParentID, 10)
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", mark, s.ID, parent, s.Time.Format(time.DateTime), s.Operation,
					s.Summary["total-records"], describeChange(s.Summary))
			}
			return w.Flush()
		},
	}
	snapshots.Flags().BoolVar(&asJSON, "json", false, "print JSON (snapshot ids as strings)")

	var to string
	rollback := &cobra.Command{
		Use:   "rollback TABLE --to SNAPSHOT_ID",
		Short: "Move the table's main branch (and its schema) back to a snapshot; rewrites metadata only",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(strings.TrimSpace(to), 10, 64)
			if err != nil {
				return fmt.Errorf("--to %q: want a snapshot id", to)
			}
			cat, err := lake.Open(cmd.Context(), *cfg, app.Logger())
			if err != nil {
				return err
			}
			defer cat.Close()
			res, err := cat.Rollback(cmd.Context(), args[0], id)
			if err != nil {
				return err
			}
			switch {
			case res.NoOp:
				fmt.Fprintf(app.Out, "%s: main is already at snapshot %d\n", res.Table, res.To)
			default:
				how := "ancestor rollback"
				if !res.Ancestor {
					how = "set main to a snapshot off its history"
				}
				fmt.Fprintf(app.Out, "%s: main moved from %d to %d (%s", res.Table, res.From, res.To, how)
				if res.Schema {
					fmt.Fprint(app.Out, ", schema restored")
				}
				fmt.Fprintln(app.Out, ")")
			}
			return nil
		},
	}
	rollback.Flags().StringVar(&to, "to", "", "snapshot id to move main to")
	_ = rollback.MarkFlagRequired("to")

	var (
		checksum bool
		limit    int
		snapID   string
	)
	scan := &cobra.Command{
		Use:   "scan TABLE",
		Short: "Print rows of a table, or with --checksum its row count and an order-independent checksum of all rows",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cat, err := lake.Open(ctx, *cfg, app.Logger())
			if err != nil {
				return err
			}
			defer cat.Close()
			tbl, err := cat.Load(ctx, args[0])
			if err != nil {
				return err
			}
			var opts []table.ScanOption
			if snapID != "" {
				id, err := strconv.ParseInt(snapID, 10, 64)
				if err != nil {
					return fmt.Errorf("--snapshot %q: want a snapshot id", snapID)
				}
				opts = append(opts, table.WithSnapshotID(id))
			}
			if checksum {
				sum, err := lake.TableChecksum(ctx, tbl, opts...)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(app.Out).Encode(sum)
				}
				fmt.Fprintf(app.Out, "rows %d\nchecksum %s\ncolumns %s\n", sum.Rows, sum.Digest, strings.Join(sum.Columns, ","))
				return nil
			}
			if tbl.CurrentSnapshot() == nil {
				fmt.Fprintln(app.Err, "table has no data")
				return nil
			}
			opts = append(opts, table.WithLimit(int64(limit)))
			schema, recs, err := tbl.Scan(opts...).ToArrowRecords(ctx)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			var names []string
			for _, f := range schema.Fields() {
				names = append(names, f.Name)
			}
			fmt.Fprintln(w, strings.Join(names, "\t"))
			for rec, err := range recs {
				if err != nil {
					return err
				}
				printRows(w, rec)
				rec.Release()
			}
			return w.Flush()
		},
	}
	scan.Flags().BoolVar(&checksum, "checksum", false, "print the row count and checksum instead of rows")
	scan.Flags().IntVar(&limit, "limit", 20, "rows to print")
	scan.Flags().StringVar(&snapID, "snapshot", "", "read this snapshot instead of main")
	scan.Flags().BoolVar(&asJSON, "json", false, "print the checksum as JSON")

	cmd.AddCommand(snapshots, rollback, scan, newTableMaintainCommand(app, cfg, &store), newTableImportCommand(app, cfg))
	return cmd
}

func describeChange(s map[string]string) string {
	var parts []string
	for _, k := range []string{"added-records", "deleted-records", "added-data-files", "deleted-data-files"} {
		if v := s[k]; v != "" && v != "0" {
			parts = append(parts, strings.TrimSuffix(k, "s")+"s="+v)
		}
	}
	if v := s["retrain.promotion.columns"]; v != "" {
		parts = append(parts, "promoted="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func printRows(w *tabwriter.Writer, rec arrow.RecordBatch) {
	for i := range int(rec.NumRows()) {
		vals := make([]string, rec.NumCols())
		for c, col := range rec.Columns() {
			vals[c] = col.ValueStr(i)
		}
		fmt.Fprintln(w, strings.Join(vals, "\t"))
	}
}

// NewDataCommand returns `retrain data`: generate data sets into the lake.
func NewDataCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{Use: "data", Short: "Generate data sets into the lake"}
	cfg := lakeFlags(cmd)
	var (
		gen     demodata.Config
		replace bool
		files   string
	)
	demo := &cobra.Command{
		Use:   "demo",
		Short: "Write the synthetic ads CTR data: ml.training and the daily feature groups",
		Long: `Writes a deterministic (for a seed) synthetic click-through data set:
ml.training (request_id, user_id, ad_id, event_ts, date, label), partitioned
by date and bucket(16, user_id) and sorted by user within files, and the
daily feature groups features.user_daily and features.ad_daily. Labels are
drawn from a known logistic model of the previous day's features
(demodata.DefaultModel), so leakage shows and a trainer can be compared with
the Bayes AUC. For feature experiments (dags/examples/feature-experiment.yaml),
features.user_signals (user_id, date: log_activity, logit_ctr_7d, recency)
holds the model's user terms, which ml.training lacks, and
features.noise_daily (user_id, date: noise_a, noise_b) pure noise that no
label depends on.

With --files DIR, the same rows go to Parquet files instead of the lake, for
splits of files (dags/examples/feature-experiment-files.yaml): DIR/clicks,
DIR/user_signals and DIR/noise_daily, each a date=YYYY-MM-DD folder per day
whose files have no date column, as a team's daily exports look.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := app.Logger()
			if files != "" {
				res, err := demodata.WriteFiles(files, gen)
				if err != nil {
					return err
				}
				fmt.Fprintf(app.Out, "wrote %d training rows (%s..%s) and %d feature rows in %d Parquet files under %s (%s, %s, %s)\n",
					res.TrainingRows, res.Start, res.End, res.FeatureRows, res.Files, res.Dir, demodata.ClicksFolder, demodata.SignalsFolder, demodata.NoiseFolder)
				return nil
			}
			cat, err := lake.Open(ctx, *cfg, log)
			if err != nil {
				return err
			}
			defer cat.Close()
			res, err := demodata.Write(ctx, cat, gen, demodata.DefaultTables, replace, log)
			if err != nil {
				return err
			}
			secs := res.Elapsed.Seconds()
			fmt.Fprintf(app.Out, "wrote %d training rows (%s..%s), %d user feature rows, %d ad feature rows, %d user signal rows, %d noise feature rows in %.1fs (%.0f training rows/s)\n",
				res.TrainingRows, res.First, res.Last, res.UserRows, res.AdRows, res.SignalRows, res.NoiseRows, secs, float64(res.TrainingRows)/secs)
			fmt.Fprintf(app.Out, "tables: %s, %s, %s, %s, %s in %s\n", res.Tables.Training, res.Tables.Users, res.Tables.Ads, res.Tables.Signals, res.Tables.Noise, cat.Config())
			return nil
		},
	}
	f := demo.Flags()
	f.Int64Var(&gen.Rows, "rows", 100_000, "training rows")
	f.IntVar(&gen.Days, "days", 14, "training days (features start a day earlier)")
	f.Uint64Var(&gen.Seed, "seed", 1, "random seed: the same seed writes the same data")
	f.IntVar(&gen.Users, "users", 0, "users (default max(1000, rows/200))")
	f.IntVar(&gen.Ads, "ads", 0, "ads (default max(100, rows/2000))")
	f.StringVar(&gen.Broken.Feature, "broken-feature", "", "break this feature column on purpose (for testing data checks)")
	f.StringVar(&gen.Broken.Mode, "broken-mode", "nulls", "how to break it: nulls, constant or garbage")
	f.BoolVar(&replace, "replace", false, "drop and rewrite the demo tables if they exist")
	f.StringVar(&files, "files", "", "write Parquet files in date= folders under this folder instead of the lake")
	cmd.AddCommand(demo)
	return cmd
}
