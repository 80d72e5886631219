package lake

import (
	"context"
	"fmt"
	"io/fs"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// removeOrphans deletes, with iceberg-go's DeleteOrphanFiles, the files
// under the table's location that no snapshot, manifest or metadata file
// references and that are older than the margin; on S3 and on local disk
// alike (both IOs list, see s3FS.WalkDir). It does not take the table's
// commit lock: the margin, not a lock, is what keeps a file being written
// by an uncommitted promotion (here or on another host) safe.
//
// Younger orphans are counted with a second plan at a zero margin, so the
// report says what the margin kept.
func (c *Catalog) removeOrphans(ctx context.Context, name string, o MaintainOptions) (OrphanResult, error) {
	var out OrphanResult
	tbl, err := c.Load(ctx, name)
	if err != nil {
		return out, err
	}
	all, err := tbl.PlanOrphanFiles(ctx, table.WithFilesOlderThan(0))
	if err != nil {
		return out, fmt.Errorf("list orphans: %w", err)
	}
	res, err := tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(o.margin()), table.WithDryRun(o.DryRun))
	if err != nil {
		return out, err
	}
	out.Removed, out.Bytes = res.OrphanFileLocations, res.TotalSizeBytes
	if !o.DryRun {
		out.Removed = res.DeletedFiles
	}
	out.Young = max(0, len(all.Files())-len(res.OrphanFileLocations))
	if len(out.Removed) > 0 {
		c.log.Info("lake: orphan files removed", "table", name, "files", len(out.Removed), "bytes", out.Bytes, "dry_run", o.DryRun, "younger_kept", out.Young)
	}
	return out, nil
}

// footprint counts a table's snapshots, the data files of main's head and
// every file under its location.
func footprint(ctx context.Context, tbl *table.Table) (Footprint, error) {
	var f Footprint
	f.Snapshots = len(tbl.Metadata().Snapshots())
	if tbl.CurrentSnapshot() != nil {
		tasks, err := tbl.Scan().PlanFiles(ctx)
		if err != nil {
			return f, fmt.Errorf("plan files of %s: %w", Name(tbl.Identifier()), err)
		}
		f.DataFiles = len(tasks)
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return f, err
	}
	l, ok := fsys.(icebergio.ListableIO)
	if !ok {
		return f, fmt.Errorf("the IO of %s (%T) cannot list files", Name(tbl.Identifier()), fsys)
	}
	err = l.WalkDir(tbl.Location(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f.Files++
		f.Bytes += info.Size()
		return nil
	})
	if err != nil {
		return f, fmt.Errorf("list files of %s: %w", Name(tbl.Identifier()), err)
	}
	return f, nil
}
