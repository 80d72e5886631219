package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/lakeimport"
)

// newTableImportCommand returns `retrain table import`: Parquet files into
// a table of the lake, in one snapshot.
func newTableImportCommand(app *App, cfg *lake.Config) *cobra.Command {
	var (
		from        []string
		partitionBy string
		mode        string
		dateColumn  string
		primaryKey  []string
	)
	cmd := &cobra.Command{
		Use:   "import TABLE --from FILES...",
		Short: "Load Parquet files into a table of the lake in one snapshot (creating it from the files' schema)",
		Long: `Loads local Parquet files (files, folders of .parquet files, or globs) into
an Iceberg table of the lake, in one snapshot. Every file's schema is read
and checked first: the files must agree with each other, and with the table
when it exists (the same columns, types the table can take); the first file
that differs is named and nothing is written. A new table takes the files'
schema and --partition-by; rows stream file by file, so large inputs do not
need memory for the whole set. Hive-style key=value folders
(date=2026-11-21/region=eu/) become columns when the files lack them: the
--date-column key as a DATE, any other as a string. --primary-key gives a
new table its identifier fields, which stage_features joins on.

  retrain table import ml.clicks --from logs/ --partition-by 'date,bucket(16,user_id)' --primary-key request_id
  retrain table import ml.clicks --from 'logs/date=2026-11-2*/*.parquet'
  retrain table import ml.clicks --from rebuilt/ --mode overwrite`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			by, err := lakeimport.ParsePartitionBy(partitionBy)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cat, err := lake.Open(ctx, *cfg, app.Logger())
			if err != nil {
				return err
			}
			defer cat.Close()
			res, err := lakeimport.Import(ctx, cat, lakeimport.Options{
				Table: args[0], From: from, PartitionBy: by, Mode: lakeimport.Mode(mode), DateColumn: dateColumn, PrimaryKey: primaryKey,
			}, app.Logger())
			if err != nil {
				return err
			}
			verb := "appended to"
			switch {
			case res.Created:
				verb = "created"
			case mode == string(lakeimport.Overwrite):
				verb = "overwrote"
			}
			fmt.Fprintf(app.Out, "%s %s: %d rows from %d files (%d bytes) in %d data files, snapshot %d, in %.1fs\n",
				verb, res.Table, res.Rows, res.Files, res.Bytes, res.DataFiles, res.SnapshotID, res.Elapsed.Seconds())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&from, "from", nil, "Parquet files, folders or globs (repeat or comma-separate)")
	f.StringVar(&partitionBy, "partition-by", "", "partitioning of a new table: columns and transforms, as 'date,bucket(16,user_id)' (identity, bucket(N,col), truncate(W,col), year, month, day, hour)")
	f.StringVar(&mode, "mode", string(lakeimport.Append), "append (add the rows) or overwrite (the files' rows replace the table's)")
	f.StringVar(&dateColumn, "date-column", lakeimport.DefaultDateColumn, "the key of the key=value folders that reads as a DATE column when the files lack it")
	f.StringSliceVar(&primaryKey, "primary-key", nil, "the primary key (Iceberg identifier fields) of a new table, as request_id: the two-stage backfill joins on it")
	_ = cmd.MarkFlagRequired("from")
	return cmd
}
