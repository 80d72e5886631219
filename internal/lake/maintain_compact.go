package lake

import (
	"context"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/compaction"
)

// compact bin-packs each partition's small files into files of the target
// size with iceberg-go's planner (compaction.Analyze) and rewrites them
// with Transaction.RewriteDataFiles in one atomic snapshot, inside Update:
// the transaction is pinned to main's head, so a promotion that commits
// while the files are rewritten makes this commit fail and the compaction
// is planned again on the fresh table (its files of the lost round are
// orphans for a later orphan removal). A promotion that loses to the
// compaction re-plans, or re-bases when the compaction touched none of its
// partitions, as it does against any commit. Rows are read and written
// as they are: the table checksum does not change; the order of rows
// within a partition may (files are concatenated, not re-sorted).
func (c *Catalog) compact(ctx context.Context, name string, o MaintainOptions) (CompactionResult, error) {
	var out CompactionResult
	rounds := 0
	tbl, err := c.Update(ctx, name, func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		rounds++
		out = CompactionResult{Rounds: rounds}
		if tbl.CurrentSnapshot() == nil {
			return nil
		}
		cfg, err := compactionConfig(tbl, o)
		if err != nil {
			return err
		}
		plan, err := compaction.Analyze(ctx, tbl, cfg)
		if err != nil {
			return err
		}
		groups := make([]table.CompactionTaskGroup, 0, len(plan.Groups))
		for _, g := range plan.Groups {
			groups = append(groups, table.CompactionTaskGroup{PartitionKey: g.PartitionKey, Tasks: g.Tasks, TotalSizeBytes: g.TotalSizeBytes})
			out.FilesBefore += len(g.Tasks)
			out.BytesBefore += g.TotalSizeBytes
		}
		out.Groups = len(groups)
		if o.DryRun || len(groups) == 0 {
			out.FilesAfter, out.BytesAfter = plan.EstOutputFiles, plan.EstOutputBytes
			return nil // staged nothing: Update commits nothing
		}
		r, err := tx.RewriteDataFiles(ctx, groups, table.RewriteDataFilesOptions{
			SnapshotProps: iceberg.Properties{PropMaintenance: "compact"},
			GroupOptions:  []table.CompactionGroupOption{table.WithCompactionTargetFileSize(cfg.TargetFileSizeBytes)},
		})
		if err != nil {
			return fmt.Errorf("rewrite %d groups: %w", len(groups), err)
		}
		out.FilesAfter, out.BytesAfter = r.AddedDataFiles, r.BytesAfter
		if o.beforeCompactCommit != nil {
			o.beforeCompactCommit(rounds)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	if !o.DryRun && out.Groups > 0 {
		if cur := tbl.CurrentSnapshot(); cur != nil {
			out.Snapshot = cur.SnapshotID
		}
		c.log.Info("lake: compacted", "table", name, "groups", out.Groups, "files_before", out.FilesBefore,
			"files_after", out.FilesAfter, "snapshot", out.Snapshot, "rounds", out.Rounds)
	}
	return out, nil
}

// compactionConfig is iceberg-go's default bin-packing around the target
// size: files below 75% of it are small, files above 180% are left alone.
func compactionConfig(tbl *table.Table, o MaintainOptions) (compaction.Config, error) {
	target := o.TargetFileSize
	if target == 0 {
		target = tbl.Properties().GetInt64(table.WriteTargetFileSizeBytesKey, table.WriteTargetFileSizeBytesDefault)
	}
	if target <= 0 {
		return compaction.Config{}, fmt.Errorf("target file size %d: must be positive", target)
	}
	cfg := compaction.DefaultConfig()
	cfg.TargetFileSizeBytes = target
	cfg.MinFileSizeBytes = target * 3 / 4
	cfg.MaxFileSizeBytes = target * 9 / 5
	// Two small files in a partition are already worth one: a daily run
	// adds one file per partition it writes (iceberg-go's default, 5,
	// would leave a partition of four days' files alone).
	cfg.MinInputFiles = 2
	if o.MinInputFiles > 0 {
		cfg.MinInputFiles = uint(o.MinInputFiles)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}
