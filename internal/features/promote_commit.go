package features

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/lake"
)

// errReplan leaves Update's build without committing what it staged.
var errReplan = errors.New("promotion must be planned again")

// CommitPromotion lands the files the bucket activities wrote as one
// snapshot of the training table that replaces exactly the partitions they
// rewrote, together with the schema change. It is idempotent: a retry
// after a commit whose result was lost finds the snapshot by the plan's
// promotion id and reports it instead of committing again. If another
// commit has landed since the plan was made, the promotion is re-based on
// it (its files committed as they are, nothing rewritten) when that commit
// left the promotion's partitions and schema as planned; otherwise it
// commits nothing and reports a conflict, and the promotion must be
// planned and run again.
func CommitPromotion(ctx context.Context, cat *lake.Catalog, plan *PromotionPlan, results []BucketResult, log *slog.Logger) (CommitResult, error) {
	if log == nil {
		log = slog.Default()
	}
	if plan.Already != 0 {
		// In place already: nothing to commit, and nothing of it for this
		// run to undo (previous = snapshot).
		return CommitResult{Already: true, Snapshot: plan.Already, PreviousSnapshot: plan.Already}, nil
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
					if snap.ParentSnapshotID != nil {
						out.PreviousSnapshot = *snap.ParentSnapshotID // the base, or what it was re-based on
					}
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
		// The pending lists first: a re-base must be refused before
		// anything is staged on the transaction.
		var pendings []pending
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
			pendings = append(pendings, p)
			for _, path := range p.Replaced {
				replace[path] = true
			}
		}
		if s.moved || cur == nil || cur.SnapshotID != plan.BaseSnapshot {
			// Another commit landed after the plan. Its files were written
			// from the base snapshot; they still say the right thing if
			// the partitions they replace are exactly as the plan saw them
			// (the schema was checked by resolve).
			why, err := touched(ctx, tbl, plan, replace)
			if err != nil {
				return err
			}
			if why != "" {
				out.Conflict, out.Reason, out.CurrentSnapshot = true, why, cur.SnapshotID
				return nil
			}
			out.PreviousSnapshot, out.Rebased = cur.SnapshotID, true
		}
		// The transaction Update gave us pins main where it is now; stage
		// the schema change and the file replacement on it.
		if err := stageSchema(tx, s.stagingChecked, s.checked); err != nil {
			return err
		}
		staged, err := tx.StagedTable()
		if err != nil {
			return err
		}
		if got, _ := json.Marshal(staged.Schema()); !bytes.Equal(got, plan.TargetSchema) {
			// Not a nil return: the schema change is staged on tx, and
			// Update would commit it.
			out.Conflict, out.Reason, out.CurrentSnapshot = true, "schema differs from the plan", cur.SnapshotID
			return errReplan
		}
		var add []iceberg.DataFile
		for i, p := range pendings {
			files, err := lake.DecodeDataFiles(staged.Table, staged.Schema(), p.Added)
			if err != nil {
				return fmt.Errorf("pending files %s: %w", results[i].URI, err)
			}
			add = append(add, files...)
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
		if plan.Inputs != "" {
			props[PropPromotionInputs] = plan.Inputs
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
		if errors.Is(err, errReplan) {
			return out, nil
		}
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
	log.Info("promote: committed", "table", plan.Spec.Training, "previous", out.PreviousSnapshot, "snapshot", out.Snapshot, "files", out.Files, "replaced", out.Replaced, "rebased", out.Rebased)
	return out, nil
}

// touched says why a promotion planned on an earlier snapshot of tbl can
// no longer be committed on top of it as it is ("" if it can): its
// partitions must hold exactly the files it replaces, no more (another
// writer added rows there) and no fewer (another writer replaced some).
// The check reads manifests only, no data.
func touched(ctx context.Context, tbl *table.Table, plan *PromotionPlan, replace map[string]bool) (string, error) {
	rng, err := backfill.ParseDateRange(plan.Spec.StartDate, plan.Spec.EndDate)
	if err != nil {
		return "", badInput("%v", err)
	}
	files, err := lake.FilesOf(ctx, tbl.Scan(table.WithRowFilter(lake.DateRange(plan.Spec.DateColumn, int32(rng.Start), int32(rng.End)))))
	if err != nil {
		return "", err
	}
	seen := 0
	for _, df := range files {
		if !replace[df.FilePath()] {
			return fmt.Sprintf("training table %s moved to snapshot %d, which changed partitions this promotion rewrites (%s..%s)",
				plan.Spec.Training, tbl.CurrentSnapshot().SnapshotID, plan.Spec.StartDate, plan.Spec.EndDate), nil
		}
		seen++
	}
	if seen != len(replace) {
		return fmt.Sprintf("training table %s moved to snapshot %d, which replaced %d files this promotion rewrites",
			plan.Spec.Training, tbl.CurrentSnapshot().SnapshotID, len(replace)-seen), nil
	}
	return "", nil
}
