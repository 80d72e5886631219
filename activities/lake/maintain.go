package lake

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/nodetype"
)

// MaintainWith is a maintain_table node's `with` block; the fields mean
// what `retrain table maintain`'s flags do.
type MaintainWith struct {
	Table           string   `json:"table" required:"true" doc:"namespace.table to maintain"`
	ExpireOlderThan string   `json:"expire_older_than" default:"30d" doc:"expire snapshots older than this, e.g. 30d (\"off\": expire none); main's head, what a rollback of the last keep_last runs needs and the snapshots model versions trained on are kept"`
	KeepLast        int      `json:"keep_last" default:"10" doc:"keep what a rollback of main's last N runs needs, whatever its age"`
	KeepSnapshots   []string `json:"keep_snapshots" doc:"also keep these snapshot ids"`
	Models          bool     `json:"models" default:"true" doc:"keep the snapshots model versions trained on (their data_snapshots, from the worker's model registry)"`
	RemoveOrphans   bool     `json:"remove_orphans" doc:"delete files no snapshot references that are older than orphan_margin"`
	OrphanMargin    string   `json:"orphan_margin" default:"3d" doc:"only delete orphan files older than this (never a file of a run in flight)"`
	Compact         bool     `json:"compact" doc:"rewrite each partition's small files into files of the table's write.target-file-size-bytes, in one snapshot with the same rows"`
	DryRun          bool     `json:"dry_run" doc:"say what would be done; change nothing"`
}

// options checks w as `table maintain` checks its flags.
func (w MaintainWith) options() (lake.MaintainOptions, error) {
	o := lake.MaintainOptions{KeepLast: w.KeepLast, RemoveOrphans: w.RemoveOrphans, Compact: w.Compact, DryRun: w.DryRun, Keep: map[int64]string{}}
	if s := strings.TrimSpace(w.ExpireOlderThan); s != "off" {
		d, err := dags.ParseDuration(s)
		if err != nil {
			return o, fmt.Errorf("expire_older_than: %w (or \"off\")", err)
		}
		o.Expire, o.ExpireOlderThan = true, d
	}
	d, err := dags.ParseDuration(strings.TrimSpace(w.OrphanMargin))
	if err != nil {
		return o, fmt.Errorf("orphan_margin: %w", err)
	}
	if d == 0 {
		return o, errors.New("orphan_margin must be positive: a file younger than it may belong to a run in flight")
	}
	o.OrphanMargin = d
	for _, s := range w.KeepSnapshots {
		id, err := SnapshotID(s)
		if err != nil {
			return o, fmt.Errorf("keep_snapshots: %w", err)
		}
		o.Keep[id] = "keep_snapshots"
	}
	return o, o.Validate()
}

// MaintainOutputs are a maintain_table node's outputs.
type MaintainOutputs struct {
	Table            string   `json:"table"`
	DryRun           bool     `json:"dry_run"`
	SnapshotsBefore  int      `json:"snapshots_before"`
	SnapshotsAfter   int      `json:"snapshots_after"`
	DataFilesBefore  int      `json:"data_files_before"` // in main's head
	DataFilesAfter   int      `json:"data_files_after"`
	FilesBefore      int      `json:"files_before"` // every file under the table
	FilesAfter       int      `json:"files_after"`
	BytesBefore      int64    `json:"bytes_before"`
	BytesAfter       int64    `json:"bytes_after"`
	Expired          []string `json:"expired"` // snapshot ids, as strings: they are 64-bit
	Kept             int      `json:"kept"`    // snapshots old enough to expire, kept for a reason
	CompactedFiles   int      `json:"compacted_files"`
	CompactionFiles  int      `json:"compaction_files"` // what they became
	CompactionSnapID int64    `json:"compaction_snapshot_id,string"`
	OrphansRemoved   int      `json:"orphans_removed"`
	OrphansYoung     int      `json:"orphans_young"` // younger than the margin: kept
	Summary          string   `json:"summary"`       // one line for the run's node table
}

func maintainOutputs(r lake.MaintainResult) MaintainOutputs {
	o := MaintainOutputs{
		Table: r.Table, DryRun: r.DryRun,
		SnapshotsBefore: r.Before.Snapshots, SnapshotsAfter: r.After.Snapshots,
		DataFilesBefore: r.Before.DataFiles, DataFilesAfter: r.After.DataFiles,
		FilesBefore: r.Before.Files, FilesAfter: r.After.Files, BytesBefore: r.Before.Bytes, BytesAfter: r.After.Bytes,
		Expired: make([]string, 0, len(r.Expired)), Kept: len(r.Kept),
	}
	for _, id := range r.Expired {
		o.Expired = append(o.Expired, strconv.FormatInt(id, 10))
	}
	if c := r.Compaction; c != nil {
		o.CompactedFiles, o.CompactionFiles, o.CompactionSnapID = c.FilesBefore, c.FilesAfter, c.Snapshot
	}
	if or := r.Orphans; or != nil {
		o.OrphansRemoved, o.OrphansYoung = len(or.Removed), or.Young
	}
	s := fmt.Sprintf("%s: snapshots %d → %d, data files %d → %d, files %d → %d", o.Table, o.SnapshotsBefore, o.SnapshotsAfter,
		o.DataFilesBefore, o.DataFilesAfter, o.FilesBefore, o.FilesAfter)
	if r.DryRun {
		s = fmt.Sprintf("dry run, %s: would expire %d snapshots, compact %d files into %d, remove %d orphans", o.Table,
			len(o.Expired), o.CompactedFiles, o.CompactionFiles, o.OrphansRemoved)
	}
	o.Summary = s
	return o
}

func (l *Lake) maintainType() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name: "maintain_table",
		Doc: "Table upkeep for a nightly schedule: compact each partition's small files (one snapshot, same rows; a promotion committing meanwhile makes it plan again), " +
			"expire snapshots older than expire_older_than except main's head, what a rollback of the last keep_last runs needs and the snapshots model versions trained on, " +
			"and remove files no snapshot references older than orphan_margin. As `retrain table maintain`.",
		Check: func(with map[string]any) error {
			w, err := nodetype.DecodeWith[MaintainWith](with)
			if err != nil || dags.HasRef(with) {
				return nil // references are checked when they resolve
			}
			_, err = w.options()
			return err
		},
	}, l.Maintain)
}

// Maintain runs a maintain_table node.
func (l *Lake) Maintain(ctx context.Context, in nodetype.Input, w MaintainWith) (MaintainOutputs, error) {
	if _, err := lake.Ident(w.Table); err != nil {
		return MaintainOutputs{}, nodetype.Permanent(errtype.BadInput, "table: %v", err)
	}
	o, err := w.options()
	if err != nil {
		return MaintainOutputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	cat, err := l.Open(ctx)
	if err != nil {
		return MaintainOutputs{}, err
	}
	if _, err := cat.Load(ctx, w.Table); err != nil {
		return MaintainOutputs{}, Error(err)
	}
	if o.Expire && w.Models {
		// Without the registry, expiry could remove what a model trained on.
		if l.Store == nil {
			return MaintainOutputs{}, nodetype.Permanent(errtype.BadInput,
				"this worker has no model store to read which snapshots model versions trained on; set models: false to keep none for them")
		}
		trained, err := models.New(l.Store).TrainedSnapshots(ctx)
		if err != nil {
			return MaintainOutputs{}, fmt.Errorf("model registry: %w", err)
		}
		for id, refs := range trained {
			o.Keep[id] = "trained " + strings.Join(refs, ", ")
		}
	}
	res, err := cat.MaintainTable(ctx, w.Table, o)
	if err != nil {
		return MaintainOutputs{}, Error(err)
	}
	out := maintainOutputs(res)
	l.log(in).Info("table maintained", "table", w.Table, "summary", out.Summary)
	return out, nil
}
