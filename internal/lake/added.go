package lake

import (
	"context"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// AddedBy keeps, of the tasks planned by a scan of snapshot snap, those
// whose files snap itself added to tbl: exactly what the commit that made
// it wrote, and nothing inherited from earlier snapshots. iceberg-go's
// incremental append scan covers append snapshots only, and a stage node's
// commit is an overwrite (it replaces its own partitions), so this reads
// the snapshot's own manifests. The kept tasks read with
// [table.Scan.ReadTasks] on the scan that planned them.
func AddedBy(ctx context.Context, tbl *table.Table, snap int64, tasks []table.FileScanTask) ([]table.FileScanTask, error) {
	s := tbl.Metadata().SnapshotByID(snap)
	if s == nil {
		return nil, fmt.Errorf("%w: table %s has no snapshot %d", ErrNoSuchSnapshot, Name(tbl.Identifier()), snap)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	manifests, err := s.Manifests(fs)
	if err != nil {
		return nil, fmt.Errorf("manifests of snapshot %d: %w", snap, err)
	}
	added := map[string]bool{}
	for _, m := range manifests {
		// A manifest written by an earlier snapshot holds no file added
		// by this one.
		if m.SnapshotID() != snap || m.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		entries, err := m.FetchEntries(fs, true)
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", m.FilePath(), err)
		}
		for _, e := range entries {
			if e.Status() == iceberg.EntryStatusADDED && e.SnapshotID() == snap {
				added[e.DataFile().FilePath()] = true
			}
		}
	}
	var out []table.FileScanTask
	for _, t := range tasks {
		if added[t.File.FilePath()] {
			out = append(out, t)
		}
	}
	return out, nil
}
