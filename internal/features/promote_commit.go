package features

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// CommitPromotion lands the files the bucket activities wrote as one
// snapshot of the training table that replaces exactly the partitions they
// rewrote, together with the schema change. It is idempotent: a retry
// after a commit whose result was lost finds the snapshot by the plan's
// promotion id and reports it instead of committing again. If the table
// has moved since the plan was made it commits nothing and reports a
// conflict, and the promotion must be planned and run again.
func CommitPromotion(ctx context.Context, cat *lake.Catalog, plan *PromotionPlan, results []BucketResult, log *slog.Logger) (CommitResult, error) {
	if log == nil {
		log = slog.Default()
	}
	res := CommitResult{PreviousSnapshot: plan.BaseSnapshot}
	var out CommitResult
	tbl, err := cat.Update(ctx, plan.Spec.Training, func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		out = res
		cur := tbl.CurrentSnapshot()
		if cur != nil {
			// Committed already (by an attempt whose result was lost)?
			for _, snap := range table.AncestorsOf(cur.SnapshotID, tbl.Metadata().SnapshotByID) {
				if snap.SnapshotID == plan.BaseSnapshot {
					break
				}
				if snap.Summary != nil && snap.Summary.Properties[PropPromotionID] == plan.ID {
					out.Already, out.Snapshot = true, snap.SnapshotID
					return nil
				}
			}
		}
		for _, r := range results {
			if r.Stale {
				out.Conflict, out.Reason = true, "a bucket activity found the table moved"
			}
		}
		s, err := resolve(ctx, cat, plan)
		if err != nil {
			return err
		}
		if s.stale != "" {
			out.Conflict, out.Reason = true, s.stale
		}
		if out.Conflict {
			if cur != nil {
				out.CurrentSnapshot = cur.SnapshotID
			}
			return nil
		}
		// The transaction Update gave us pins main at the base; stage the
		// schema change and the file replacement on it.
		if err := stageSchema(tx, s.stagingChecked, s.checked); err != nil {
			return err
		}
		staged, err := tx.StagedTable()
		if err != nil {
			return err
		}
		if got, _ := json.Marshal(staged.Schema()); !bytes.Equal(got, plan.TargetSchema) {
			out.Conflict, out.Reason = true, "schema differs from the plan"
			return nil
		}
		var add []iceberg.DataFile
		replace := map[string]bool{}
		for _, r := range results {
			raw, err := lake.ReadObject(ctx, tbl, r.URI)
			if err != nil {
				return err
			}
			var p pending
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("pending files %s: %w", r.URI, err)
			}
			if p.Promotion != plan.ID {
				return fmt.Errorf("pending files %s belong to promotion %s, not %s", r.URI, p.Promotion, plan.ID)
			}
			files, err := lake.DecodeDataFiles(staged.Table, staged.Schema(), p.Added)
			if err != nil {
				return fmt.Errorf("pending files %s: %w", r.URI, err)
			}
			add = append(add, files...)
			for _, path := range p.Replaced {
				replace[path] = true
			}
		}
		existing, err := lake.FilesOf(ctx, tbl.Scan())
		if err != nil {
			return err
		}
		var del []iceberg.DataFile
		for _, df := range existing {
			if replace[df.FilePath()] {
				del = append(del, df)
				delete(replace, df.FilePath())
			}
		}
		if len(replace) > 0 {
			return fmt.Errorf("promotion %s: %d replaced files are no longer in the table", plan.ID, len(replace))
		}
		props := iceberg.Properties{
			PropPromotionID:             plan.ID,
			"retrain.promotion.columns": strings.Join(plan.Columns, ","),
			"retrain.promotion.range":   plan.Spec.StartDate + ".." + plan.Spec.EndDate,
		}
		if err := lake.ReplaceFiles(ctx, tx, del, add, props); err != nil {
			return err
		}
		promoted := splitList(tbl.Properties()[PropPromoted])
		for _, c := range plan.Columns {
			if !slices.Contains(promoted, c) {
				promoted = append(promoted, c)
			}
		}
		sort.Strings(promoted)
		if err := tx.SetProperties(iceberg.Properties{PropPromoted: strings.Join(promoted, ",")}); err != nil {
			return err
		}
		out.Files, out.Replaced = len(add), len(del)
		return nil
	})
	if err != nil {
		if lake.IsConflict(err) {
			// Lost the race at the catalog after the checks: nothing landed.
			return CommitResult{Conflict: true, PreviousSnapshot: plan.BaseSnapshot, Reason: err.Error()}, nil
		}
		return out, err
	}
	if out.Conflict || out.Already {
		return out, nil
	}
	out.Snapshot = tbl.CurrentSnapshot().SnapshotID
	// The pending lists have served; a retried commit finds the snapshot
	// by its promotion id, not through them.
	for _, r := range results {
		if err := lake.RemoveObject(ctx, tbl, r.URI); err != nil {
			log.Debug("promote: cannot remove pending list", "uri", r.URI, "error", err)
		}
	}
	log.Info("promote: committed", "table", plan.Spec.Training, "previous", out.PreviousSnapshot, "snapshot", out.Snapshot, "files", out.Files, "replaced", out.Replaced)
	return out, nil
}
