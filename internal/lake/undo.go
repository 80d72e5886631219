package lake

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Summary properties of a snapshot that undoes another one (UndoCommit):
// which snapshot it undoes and what it did, so that an undo run again
// finds it and reports the same instead of undoing twice.
const (
	PropUndoOf       = "retrain.undo.of"
	PropUndoRemoved  = "retrain.undo.removed"
	PropUndoRestored = "retrain.undo.restored"
	PropUndoKept     = "retrain.undo.kept"
	PropUndoGone     = "retrain.undo.gone"
	PropUndoSchema   = "retrain.undo.schema"
	PropUndoParts    = "retrain.undo.partitions-kept"
	PropUndoNote     = "retrain.undo.note"
)

// What UndoCommit did.
const (
	UndoMovedMain = "moved_main" // main moved back to the commit's parent, metadata only
	UndoReverted  = "reverted"   // a new snapshot took the commit's files out and put back the ones it replaced
	UndoNothing   = "nothing"    // nothing of the commit was left to take out
)

// ErrLaterCommits is returned (wrapped) by UndoCommit with MoveOnly when
// other commits landed on main after the one to undo: moving main back
// would undo them too.
var ErrLaterCommits = errors.New("other commits landed on main after it")

// ErrNotParent is returned (wrapped) by UndoCommit when the snapshot to
// undo was not made on UndoOptions.Parent, or on nothing at all: the two
// ids given do not describe one commit.
var ErrNotParent = errors.New("not the snapshot it was made on")

// ErrFilesGone is returned (wrapped) by UndoCommit when files the commit
// replaced, which the undo would put back, are no longer in storage.
var ErrFilesGone = errors.New("files to restore are gone")

// UndoOptions tune UndoCommit.
type UndoOptions struct {
	// Parent, if not 0, is the snapshot the commit must have been made
	// on (a promotion's previous_snapshot_id); another parent is an error.
	Parent int64
	// MoveOnly undoes the commit only by moving main back, when nothing
	// landed after it, and otherwise fails with ErrLaterCommits rather
	// than commit a snapshot that removes its files.
	MoveOnly bool

	beforeCommit func() // tests: land a commit between the plan and its commit
}

// UndoResult says what UndoCommit did. Ids are JSON strings: they are
// 64-bit.
type UndoResult struct {
	Table    string `json:"table"`
	Snapshot int64  `json:"snapshot_id,string"` // the commit undone
	Action   string `json:"action"`             // UndoMovedMain, UndoReverted or UndoNothing
	From     int64  `json:"from_snapshot_id,string"`
	To       int64  `json:"to_snapshot_id,string"`
	Removed  int    `json:"files_removed"`  // the commit's files taken out
	Restored int    `json:"files_restored"` // files it had replaced, put back
	// Kept are the commit's files left in the table, and Gone those later
	// commits already replaced or removed, in the partitions later
	// commits rewrote: their rows are those commits' now, so the undo
	// leaves those partitions as they are.
	Kept           int  `json:"files_kept"`
	Gone           int  `json:"files_gone"`
	KeptPartitions int  `json:"partitions_kept"`
	SchemaRestored bool `json:"schema_restored"`
	// Schema says what became of a schema change the commit made: ""
	// (it made none), "restored ..." or "kept: why".
	Schema string `json:"schema,omitempty"`
	Note   string `json:"note,omitempty"` // why nothing was done, or what was left
	// Already: an earlier undo had done it and nothing changed now; the
	// rest reports what that undo did.
	Already  bool   `json:"already"`
	Metadata string `json:"metadata_location"` // the table's metadata after
}

// UndoCommit takes out of a table's main branch what the commit that made
// snapshot snap wrote, and nothing else:
//
//   - when main's head is still snap, main moves back to snap's parent
//     (metadata only) and the parent's schema becomes current again;
//   - when other commits landed after it, one new snapshot removes the
//     files snap added and restores the files it replaced, partition by
//     partition: a partition in which a later commit replaced or removed
//     any file snap added belongs to that commit now and is left as it
//     is. The schema snap changed is restored only when no file left in
//     the table holds a value in the columns it added;
//   - when snap is no longer in main's history (or was undone already),
//     nothing is changed and the result says so; an undo found already
//     done reports what it did, so running it again is harmless.
//
// Every change is a compare-and-swap on main's head: a commit that lost a
// race is planned again on the fresh table.
func (c *Catalog) UndoCommit(ctx context.Context, name string, snap int64, opts UndoOptions) (UndoResult, error) {
	id, err := Ident(name)
	if err != nil {
		return UndoResult{}, err
	}
	var res UndoResult
	err = c.redoOnConflict(ctx, name, "undo", func(tbl *table.Table) (err error) {
		res, err = undoOnce(ctx, c, id, tbl, snap, opts)
		return err
	})
	return res, err
}

func undoOnce(ctx context.Context, c *Catalog, id table.Identifier, tbl *table.Table, snap int64, opts UndoOptions) (UndoResult, error) {
	name := Name(id)
	meta := tbl.Metadata()
	res := UndoResult{Table: name, Snapshot: snap, Metadata: tbl.MetadataLocation()}
	target := meta.SnapshotByID(snap)
	if target == nil {
		return res, fmt.Errorf("table %s has no snapshot %d (expired, or another table's): %w", name, snap, ErrNoSuchSnapshot)
	}
	if target.ParentSnapshotID == nil {
		return res, fmt.Errorf("snapshot %d is the first of table %s: there is nothing before it to go back to: %w", snap, name, ErrNotParent)
	}
	parentID := *target.ParentSnapshotID
	if opts.Parent != 0 && opts.Parent != parentID {
		return res, fmt.Errorf("snapshot %d of table %s was made on snapshot %d, not %d: %w", snap, name, parentID, opts.Parent, ErrNotParent)
	}
	cur := tbl.CurrentSnapshot()
	if cur == nil {
		return res, fmt.Errorf("table %s has no current snapshot", name)
	}
	res.From, res.To = cur.SnapshotID, cur.SnapshotID
	parent := meta.SnapshotByID(parentID) // nil once expired

	// Main's history, newest first, down to snap.
	var later []table.Snapshot
	onMain, parentOnMain := false, false
	for _, s := range table.AncestorsOf(cur.SnapshotID, meta.SnapshotByID) {
		if s.SnapshotID == snap {
			onMain = true
			break
		}
		if s.SnapshotID == parentID {
			parentOnMain = true
			break
		}
		later = append(later, s)
	}
	if !onMain {
		if parentOnMain {
			// Main was moved back over snap: by an earlier undo of it,
			// whose result this reports again.
			res.Action, res.Already, res.From, res.To = UndoMovedMain, true, snap, parentID
			res.SchemaRestored = parent != nil && schemaOf(target) != schemaOf(parent) && tbl.Schema().ID == schemaOf(parent)
			if res.SchemaRestored {
				res.Schema = fmt.Sprintf("restored: schema %d is current again", schemaOf(parent))
			}
			return res, nil
		}
		res.Action = UndoNothing
		res.Note = fmt.Sprintf("snapshot %d is not in the history of main (at %d): nothing of it to take out", snap, cur.SnapshotID)
		return res, nil
	}
	for _, s := range later {
		if s.Summary != nil && s.Summary.Properties[PropUndoOf] == strconv.FormatInt(snap, 10) {
			return undoneBy(res, s), nil
		}
	}
	if len(later) == 0 && parent != nil {
		return moveBack(ctx, c, id, tbl, target, parent, opts, res)
	}
	if opts.MoveOnly {
		if len(later) == 0 {
			return res, fmt.Errorf("cannot move main of %s back before snapshot %d: snapshot %d was expired", name, snap, parentID)
		}
		return res, fmt.Errorf("table %s: %d commits landed on main after snapshot %d (main is at %d); moving main back would undo them too, so it was left alone: %w",
			name, len(later), snap, cur.SnapshotID, ErrLaterCommits)
	}
	return revert(ctx, tbl, target, parent, opts, res)
}

func schemaOf(s *table.Snapshot) int {
	if s == nil || s.SchemaID == nil {
		return -1
	}
	return *s.SchemaID
}

// undoneBy reports the earlier undo that snapshot s records.
func undoneBy(res UndoResult, s table.Snapshot) UndoResult {
	p := s.Summary.Properties
	n := func(key string) int { v, _ := strconv.Atoi(p[key]); return v }
	res.Action, res.Already, res.To = UndoReverted, true, s.SnapshotID
	if s.ParentSnapshotID != nil {
		res.From = *s.ParentSnapshotID
	}
	res.Removed, res.Restored, res.Kept, res.Gone = n(PropUndoRemoved), n(PropUndoRestored), n(PropUndoKept), n(PropUndoGone)
	res.KeptPartitions = n(PropUndoParts)
	res.Schema, res.Note = p[PropUndoSchema], p[PropUndoNote]
	res.SchemaRestored = strings.HasPrefix(res.Schema, "restored")
	return res
}

// moveBack moves main from target, its head, to target's parent, and the
// schema back with it when target changed it and nothing changed it since.
// Both updates are one catalog commit, guarded by main's head and the
// current schema.
func moveBack(ctx context.Context, c *Catalog, id table.Identifier, tbl *table.Table, target, parent *table.Snapshot, opts UndoOptions, res UndoResult) (UndoResult, error) {
	head := target.SnapshotID
	reqs := []table.Requirement{table.AssertRefSnapshotID(MainBranch, &head)}
	updates := []table.Update{table.NewSetSnapshotRefUpdate(MainBranch, parent.SnapshotID, table.BranchRef, 0, 0, 0)}
	curSchema := tbl.Schema().ID
	if was, made := schemaOf(parent), schemaOf(target); was != made && was >= 0 {
		if curSchema == made {
			reqs = append(reqs, table.AssertCurrentSchemaID(curSchema))
			updates = append([]table.Update{table.NewSetCurrentSchemaUpdate(was)}, updates...)
			res.SchemaRestored = true
			res.Schema = fmt.Sprintf("restored: schema %d is current again", was)
		} else {
			res.Schema = fmt.Sprintf("kept: the schema changed again after snapshot %d (now %d)", head, curSchema)
		}
	}
	if opts.beforeCommit != nil {
		opts.beforeCommit()
	}
	_, loc, err := c.cat.CommitTable(ctx, id, reqs, updates)
	if err != nil {
		return res, fmt.Errorf("move main of %s back to %d: %w", Name(id), parent.SnapshotID, err)
	}
	res.Action, res.To, res.Metadata = UndoMovedMain, parent.SnapshotID, loc
	return res, nil
}

// revert commits a snapshot on top of main that takes target's files out
// and puts back those it replaced, in the partitions no later commit
// rewrote.
func revert(ctx context.Context, tbl *table.Table, target, parent *table.Snapshot, opts UndoOptions, res UndoResult) (UndoResult, error) {
	name := Name(tbl.Identifier())
	added, deleted, err := commitFiles(ctx, tbl, target)
	if err != nil {
		return res, err
	}
	liveFiles, err := FilesOf(ctx, tbl.Scan())
	if err != nil {
		return res, err
	}
	live := make(map[string]iceberg.DataFile, len(liveFiles))
	for _, df := range liveFiles {
		live[df.FilePath()] = df
	}

	// Partition by partition: revert the ones where every file target
	// added is still there, leave the others to the commits that
	// rewrote them.
	type part struct{ added, deleted []iceberg.DataFile }
	parts := map[string]*part{}
	get := func(df iceberg.DataFile) *part {
		k := fileKey(df)
		if parts[k] == nil {
			parts[k] = &part{}
		}
		return parts[k]
	}
	for _, df := range added {
		get(df).added = append(get(df).added, df)
	}
	for _, df := range deleted {
		get(df).deleted = append(get(df).deleted, df)
	}
	var remove, restore []iceberg.DataFile
	for _, p := range parts {
		gone := 0
		for _, df := range p.added {
			if _, ok := live[df.FilePath()]; !ok {
				gone++
			}
		}
		if gone > 0 {
			res.KeptPartitions++
			res.Gone += gone
			res.Kept += len(p.added) - gone
			continue
		}
		for _, df := range p.added {
			remove = append(remove, live[df.FilePath()])
		}
		for _, df := range p.deleted {
			if _, ok := live[df.FilePath()]; !ok {
				restore = append(restore, df)
			}
		}
	}
	sortFiles(remove)
	sortFiles(restore)
	res.Removed, res.Restored = len(remove), len(restore)
	if res.KeptPartitions > 0 {
		res.Note = fmt.Sprintf("%d partitions snapshot %d wrote were rewritten by later commits and were left as they are (%d of its files still in them, %d replaced or removed since): their rows belong to those commits",
			res.KeptPartitions, target.SnapshotID, res.Kept, res.Gone)
	}
	if len(remove) == 0 && len(restore) == 0 {
		res.Action = UndoNothing
		if res.Note == "" {
			res.Note = fmt.Sprintf("snapshot %d changed no data file", target.SnapshotID)
		}
		return res, nil
	}
	if err := checkExist(ctx, tbl, restore); err != nil {
		return res, err
	}

	tx := tbl.NewTransaction()
	if err := tx.AssertRefSnapshotID(MainBranch); err != nil {
		return res, fmt.Errorf("pin %s main: %w", name, err)
	}
	// The schema first, so that the new snapshot records the one it
	// leaves current.
	if res.Schema, err = restoreSchema(ctx, tx, tbl, target, parent, live, remove, restore); err != nil {
		return res, err
	}
	res.SchemaRestored = strings.HasPrefix(res.Schema, "restored")
	props := iceberg.Properties{
		PropUndoOf:       strconv.FormatInt(target.SnapshotID, 10),
		PropUndoRemoved:  strconv.Itoa(res.Removed),
		PropUndoRestored: strconv.Itoa(res.Restored),
		PropUndoKept:     strconv.Itoa(res.Kept),
		PropUndoGone:     strconv.Itoa(res.Gone),
	}
	if res.Schema != "" {
		props[PropUndoSchema] = res.Schema
	}
	if res.KeptPartitions > 0 {
		props[PropUndoParts], props[PropUndoNote] = strconv.Itoa(res.KeptPartitions), res.Note
	}
	if err := ReplaceFiles(ctx, tx, remove, restore, props); err != nil {
		return res, fmt.Errorf("undo snapshot %d of %s: %w", target.SnapshotID, name, err)
	}
	if opts.beforeCommit != nil {
		opts.beforeCommit()
	}
	committed, err := tx.Commit(ctx)
	if err != nil {
		return res, fmt.Errorf("undo snapshot %d of %s: %w", target.SnapshotID, name, err)
	}
	res.Action, res.To, res.Metadata = UndoReverted, committed.CurrentSnapshot().SnapshotID, committed.MetadataLocation()
	return res, nil
}

// commitFiles lists the data files the commit that made snap added and
// those it removed, from the manifests it wrote itself.
func commitFiles(ctx context.Context, tbl *table.Table, snap *table.Snapshot) (added, deleted []iceberg.DataFile, err error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, nil, err
	}
	manifests, err := snap.Manifests(fs)
	if err != nil {
		return nil, nil, fmt.Errorf("manifests of snapshot %d: %w", snap.SnapshotID, err)
	}
	for _, m := range manifests {
		if m.SnapshotID() != snap.SnapshotID {
			continue // written by an earlier snapshot: nothing of this one in it
		}
		if m.ManifestContent() != iceberg.ManifestContentData {
			return nil, nil, fmt.Errorf("snapshot %d wrote delete files: row-level deletes are not supported here", snap.SnapshotID)
		}
		entries, err := m.FetchEntries(fs, false)
		if err != nil {
			return nil, nil, fmt.Errorf("manifest %s: %w", m.FilePath(), err)
		}
		for _, e := range entries {
			if e.SnapshotID() != snap.SnapshotID {
				continue
			}
			switch e.Status() {
			case iceberg.EntryStatusADDED:
				added = append(added, e.DataFile())
			case iceberg.EntryStatusDELETED:
				deleted = append(deleted, e.DataFile())
			}
		}
	}
	return added, deleted, nil
}

// fileKey is the partition a data file belongs to: its spec and tuple.
func fileKey(df iceberg.DataFile) string {
	p := df.Partition()
	ids := make([]int, 0, len(p))
	for id := range p {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	fmt.Fprintf(&b, "%d", df.SpecID())
	for _, id := range ids {
		fmt.Fprintf(&b, "/%d=%v", id, p[id])
	}
	return b.String()
}

func sortFiles(files []iceberg.DataFile) {
	sort.Slice(files, func(i, j int) bool { return files[i].FilePath() < files[j].FilePath() })
}

// checkExist fails, naming them, if data files to put back are no longer
// in storage (removed with the snapshots that held them): a table that
// lists missing files cannot be read.
func checkExist(ctx context.Context, tbl *table.Table, files []iceberg.DataFile) error {
	if len(files) == 0 {
		return nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, df := range files {
		f, err := fs.Open(df.FilePath())
		if err != nil {
			missing = append(missing, df.FilePath())
			continue
		}
		f.Close()
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of the %d files to put back into %s are gone from storage (expired with their snapshots?), e.g. %s; nothing was changed: %w",
			len(missing), len(files), Name(tbl.Identifier()), missing[0], ErrFilesGone)
	}
	return nil
}
