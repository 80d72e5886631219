package lake

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultOrphanMargin is how old a file no snapshot references must be
// before it is removed: a promotion writes its data files before it
// commits them, and a run still in flight (or waiting in a table queue,
// or retrying its commit) must never lose them. Three days is iceberg-go's
// and Iceberg Java's default too.
const DefaultOrphanMargin = 72 * time.Hour

// PropMaintenance marks the snapshots table maintenance commits (its
// compactions), so that "the last N runs" counts runs, not upkeep.
const PropMaintenance = "retrain.maintenance"

// MaintainOptions says what MaintainTable does. The zero value does
// nothing and is refused by Validate.
type MaintainOptions struct {
	// Expire removes snapshots older than ExpireOlderThan, except those
	// in Keep, those a rollback of the last KeepLast runs needs, main's
	// head and those refs (tags, branches) still hold.
	Expire          bool
	ExpireOlderThan time.Duration
	// KeepLast keeps main's KeepLast most recent snapshots that are not
	// maintenance, and the parent of the oldest of them: the
	// previous_snapshot_id a rollback of each of those runs moves to.
	KeepLast int
	// Keep are snapshots kept whatever their age, with why (for
	// example "model ctr@v3 trained on it").
	Keep map[int64]string

	// RemoveOrphans deletes files under the table's location that no
	// snapshot or metadata file references and that are older than
	// OrphanMargin (0: DefaultOrphanMargin).
	RemoveOrphans bool
	OrphanMargin  time.Duration

	// Compact rewrites a partition's small files into files of
	// TargetFileSize (0: the table's write.target-file-size-bytes) in one
	// snapshot. Partitions with fewer than MinInputFiles small files (0:
	// 2) are left alone.
	Compact        bool
	TargetFileSize int64
	MinInputFiles  int

	// DryRun plans everything and changes nothing.
	DryRun bool

	// beforeCompactCommit, when set (tests), runs after the compaction is
	// written and before it commits: a commit landing there must make
	// the compaction plan again.
	beforeCompactCommit func(round int)
}

// Validate refuses options that make no sense, before anything changes.
func (o MaintainOptions) Validate() error {
	var errs []error
	if !o.Expire && !o.RemoveOrphans && !o.Compact {
		errs = append(errs, errors.New("nothing to do: ask for expiry, orphan removal or compaction"))
	}
	if o.ExpireOlderThan < 0 {
		errs = append(errs, fmt.Errorf("expire older than %s: must not be negative", o.ExpireOlderThan))
	}
	if o.KeepLast < 0 {
		errs = append(errs, fmt.Errorf("keep last %d: must not be negative", o.KeepLast))
	}
	if o.OrphanMargin < 0 {
		errs = append(errs, fmt.Errorf("orphan margin %s: must not be negative", o.OrphanMargin))
	}
	if o.TargetFileSize < 0 {
		errs = append(errs, fmt.Errorf("target file size %d: must not be negative", o.TargetFileSize))
	}
	if o.MinInputFiles < 0 {
		errs = append(errs, fmt.Errorf("min input files %d: must not be negative", o.MinInputFiles))
	}
	return errors.Join(errs...)
}

func (o MaintainOptions) margin() time.Duration {
	if o.OrphanMargin == 0 {
		return DefaultOrphanMargin
	}
	return o.OrphanMargin
}

// Footprint is what a table holds at one moment.
type Footprint struct {
	Snapshots int   `json:"snapshots"`
	DataFiles int   `json:"data_files"` // in main's head
	Files     int   `json:"files"`      // every file under the table's location: data, manifests, metadata, orphans
	Bytes     int64 `json:"bytes"`      // of Files
}

// KeptSnapshot is a snapshot expiry would have removed, kept for a reason.
type KeptSnapshot struct {
	ID  int64  `json:"snapshot_id,string"`
	Why string `json:"why"`
}

// CompactionResult says what compaction did (or would do).
type CompactionResult struct {
	Groups      int   `json:"groups"` // bins of small files, each within one partition
	FilesBefore int   `json:"files_before"`
	FilesAfter  int   `json:"files_after"` // estimated on a dry run
	BytesBefore int64 `json:"bytes_before"`
	BytesAfter  int64 `json:"bytes_after"`
	Snapshot    int64 `json:"snapshot_id,string,omitempty"`
	Rounds      int   `json:"rounds"` // plans it took: a round lost to another commit is redone
}

// OrphanResult says what orphan removal did (or would do).
type OrphanResult struct {
	Removed []string `json:"removed"` // or, on a dry run, would be
	Bytes   int64    `json:"bytes"`
	Young   int      `json:"young"` // unreferenced but younger than the margin: kept
}

// MaintainResult is what MaintainTable did.
type MaintainResult struct {
	Table      string            `json:"table"`
	DryRun     bool              `json:"dry_run"`
	Before     Footprint         `json:"before"`
	After      Footprint         `json:"after"` // equals Before on a dry run
	Compaction *CompactionResult `json:"compaction,omitempty"`
	Expired    []int64           `json:"expired,omitempty"` // snapshot ids
	Kept       []KeptSnapshot    `json:"kept,omitempty"`
	Orphans    *OrphanResult     `json:"orphans,omitempty"`
}

// MaintainTable keeps a table that a daily run writes healthy: it compacts
// small files, expires old snapshots and removes orphan files, in that
// order, so that files compaction replaced are deleted by the same run's
// expiry once no kept snapshot needs them. Each step is one commit (or
// none) guarded on main's head: a promotion landing meanwhile makes the
// step plan again on the fresh table, and a promotion that lost to it
// re-plans or re-bases as it does against any commit.
func (c *Catalog) MaintainTable(ctx context.Context, name string, o MaintainOptions) (MaintainResult, error) {
	res := MaintainResult{Table: name, DryRun: o.DryRun}
	if err := o.Validate(); err != nil {
		return res, err
	}
	tbl, err := c.Load(ctx, name)
	if err != nil {
		return res, err
	}
	if res.Before, err = footprint(ctx, tbl); err != nil {
		return res, err
	}
	if o.Compact {
		cr, err := c.compact(ctx, name, o)
		if err != nil {
			return res, fmt.Errorf("compact %s: %w", name, err)
		}
		res.Compaction = &cr
	}
	if o.Expire {
		if err := c.expire(ctx, name, o, &res); err != nil {
			return res, fmt.Errorf("expire snapshots of %s: %w", name, err)
		}
	}
	if o.RemoveOrphans {
		or, err := c.removeOrphans(ctx, name, o)
		if err != nil {
			return res, fmt.Errorf("remove orphan files of %s: %w", name, err)
		}
		res.Orphans = &or
	}
	if tbl, err = c.Load(ctx, name); err != nil {
		return res, err
	}
	if res.After, err = footprint(ctx, tbl); err != nil {
		return res, err
	}
	c.log.Info("lake: table maintained", "table", name, "dry_run", o.DryRun,
		"snapshots_before", res.Before.Snapshots, "snapshots_after", res.After.Snapshots,
		"files_before", res.Before.Files, "files_after", res.After.Files)
	return res, nil
}
