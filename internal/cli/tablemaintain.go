package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/storage"
)

// maintainFlags are `retrain table maintain`'s flags as typed.
type maintainFlags struct {
	expireOlderThan string
	keepLast        int
	keepSnapshots   []string
	removeOrphans   bool
	orphanMargin    string
	compact         bool
	targetFileSize  int64
	dryRun          bool
	models          bool
	asJSON          bool
}

// options turns the flags into MaintainOptions, refusing bad values
// before anything is opened or changed.
func (f maintainFlags) options() (lake.MaintainOptions, error) {
	o := lake.MaintainOptions{KeepLast: f.keepLast, RemoveOrphans: f.removeOrphans, Compact: f.compact,
		TargetFileSize: f.targetFileSize, DryRun: f.dryRun, Keep: map[int64]string{}}
	if s := strings.TrimSpace(f.expireOlderThan); s != "off" {
		d, err := dags.ParseDuration(s)
		if err != nil {
			return o, fmt.Errorf("--expire-older-than: %w (or \"off\")", err)
		}
		o.Expire, o.ExpireOlderThan = true, d
	}
	d, err := dags.ParseDuration(strings.TrimSpace(f.orphanMargin))
	if err != nil {
		return o, fmt.Errorf("--orphan-margin: %w", err)
	}
	if d == 0 {
		// 0 would mean "the default" below; a zero margin could delete
		// the files of a promotion about to commit.
		return o, errors.New("--orphan-margin must be positive: a file younger than it may belong to a run in flight")
	}
	o.OrphanMargin = d
	if f.keepLast < 0 {
		return o, fmt.Errorf("--keep-last %d: must be 0 or more", f.keepLast)
	}
	for _, s := range f.keepSnapshots {
		id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return o, fmt.Errorf("--keep-snapshot %q: want a snapshot id", s)
		}
		o.Keep[id] = "--keep-snapshot"
	}
	return o, o.Validate()
}

// newTableMaintainCommand returns `retrain table maintain`.
func newTableMaintainCommand(app *App, cfg *lake.Config, store *storage.Config) *cobra.Command {
	var f maintainFlags
	cmd := &cobra.Command{
		Use:   "maintain TABLE",
		Short: "Expire old snapshots, remove orphan files and compact small files of a table (run nightly)",
		Long: `Keeps a table a daily run writes healthy, in this order:

--compact          rewrites each partition's small files into files of the table's
                   write.target-file-size-bytes, in one snapshot with the same rows; a
                   promotion committing meanwhile makes it plan again
--expire-older-than removes snapshots older than the limit (default 30d; "off": none),
                   except main's head, the snapshots a rollback of the last --keep-last
                   runs needs, those model versions trained on (their data_snapshots,
                   read from the model registry) and --keep-snapshot ids; the files
                   only they referenced are deleted
--remove-orphans   deletes files under the table no snapshot references that are older
                   than --orphan-margin (default 3d: never a file of a run in flight)

--dry-run says what each step would do and changes nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			o, err := f.options()
			if err != nil {
				return err
			}
			cat, err := lake.Open(ctx, *cfg, app.Logger())
			if err != nil {
				return err
			}
			defer cat.Close()
			if _, err := cat.Load(ctx, args[0]); err != nil {
				return err // a missing table: say so before asking for a registry
			}
			if o.Expire && f.models {
				if err := keepModelSnapshots(cmd, app, *store, o.Keep); err != nil {
					return err
				}
			}
			res, err := cat.MaintainTable(ctx, args[0], o)
			if err != nil {
				return err
			}
			if f.asJSON {
				enc := json.NewEncoder(app.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			printMaintained(app, res, o, f)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.expireOlderThan, "expire-older-than", "30d", `expire snapshots older than this ("off": expire none)`)
	fl.IntVar(&f.keepLast, "keep-last", 10, "keep what a rollback of main's last N runs needs, whatever its age")
	fl.StringSliceVar(&f.keepSnapshots, "keep-snapshot", nil, "also keep this snapshot id (repeatable)")
	fl.BoolVar(&f.models, "models", true, "keep the snapshots model versions trained on (reads the model registry: --s3-uri or the dev stack's)")
	fl.BoolVar(&f.removeOrphans, "remove-orphans", false, "delete files no snapshot references, older than --orphan-margin")
	fl.StringVar(&f.orphanMargin, "orphan-margin", "3d", "only delete orphan files older than this")
	fl.BoolVar(&f.compact, "compact", false, "rewrite each partition's small files into files of the target size, in one snapshot")
	fl.Int64Var(&f.targetFileSize, "target-file-size", 0, "target file size in bytes (default: the table's write.target-file-size-bytes)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "say what would be done; change nothing")
	fl.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
	return cmd
}

// keepModelSnapshots adds to keep the snapshots model versions trained on.
// Without a registry to read, expiry could remove them: refuse.
func keepModelSnapshots(cmd *cobra.Command, app *App, cfg storage.Config, keep map[int64]string) error {
	st, err := storage.Open(cmd.Context(), cfg, app.Logger())
	if errors.Is(err, storage.ErrNotConfigured) {
		return fmt.Errorf("cannot tell which snapshots model versions trained on: %w; or pass --models=false to keep none for them", err)
	}
	if err != nil {
		return fmt.Errorf("model registry: %w", err)
	}
	trained, err := models.New(st).TrainedSnapshots(cmd.Context())
	if err != nil {
		return err
	}
	for id, refs := range trained {
		keep[id] = "trained " + strings.Join(refs, ", ")
	}
	return nil
}

func printMaintained(app *App, r lake.MaintainResult, o lake.MaintainOptions, f maintainFlags) {
	w := app.Out
	verb := func(done, would string) string {
		if r.DryRun {
			return would
		}
		return done
	}
	if c := r.Compaction; c != nil {
		switch {
		case c.Groups == 0:
			fmt.Fprintln(w, "compact: no partition has small files to merge")
		default:
			fmt.Fprintf(w, "compact: %s %d files (%d B) in %d groups into %d (%d B)", verb("rewrote", "would rewrite"),
				c.FilesBefore, c.BytesBefore, c.Groups, c.FilesAfter, c.BytesAfter)
			if !r.DryRun {
				fmt.Fprintf(w, ": snapshot %d", c.Snapshot)
			}
			fmt.Fprintln(w)
		}
	}
	if o.Expire {
		fmt.Fprintf(w, "expire: %s %d snapshots older than %s", verb("expired", "would expire"), len(r.Expired), strings.TrimSpace(f.expireOlderThan))
		if len(r.Kept) > 0 {
			fmt.Fprintf(w, "; kept %d older ones:", len(r.Kept))
		}
		fmt.Fprintln(w)
		for _, k := range r.Kept {
			fmt.Fprintf(w, "  %d  %s\n", k.ID, k.Why)
		}
	}
	if or := r.Orphans; or != nil {
		fmt.Fprintf(w, "orphans: %s %d files (%d B) older than %s; %d younger kept\n", verb("removed", "would remove"),
			len(or.Removed), or.Bytes, strings.TrimSpace(f.orphanMargin), or.Young)
	}
	fmt.Fprintf(w, "%s: snapshots %d -> %d, data files in main %d -> %d, files under the table %d -> %d (%d B -> %d B)\n",
		r.Table, r.Before.Snapshots, r.After.Snapshots, r.Before.DataFiles, r.After.DataFiles, r.Before.Files, r.After.Files, r.Before.Bytes, r.After.Bytes)
	if r.DryRun {
		fmt.Fprintln(w, "dry run: nothing was changed")
	}
}
