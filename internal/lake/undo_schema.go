package lake

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// restoreSchema decides, for an undo that commits a reverting snapshot
// (revert), whether the columns target added to the schema can be hidden
// again, and if so stages that on tx: the schema before target becomes
// current again. It can when nothing changed the schema after target and
// no file the table keeps after the undo holds a value in those columns:
// later commits written with them (another promotion of the same columns,
// say) would otherwise lose data from view. It returns what it did for
// UndoResult.Schema: "" when target changed no schema, "restored: ..." or
// "kept: why".
func restoreSchema(ctx context.Context, tx *table.Transaction, tbl *table.Table, target, parent *table.Snapshot,
	live map[string]iceberg.DataFile, remove, restore []iceberg.DataFile) (string, error) {
	made := schemaOf(target)
	if parent == nil {
		return fmt.Sprintf("kept: the snapshot before %d was expired, so the schema before it is not known", target.SnapshotID), nil
	}
	was := schemaOf(parent)
	if was == made || was < 0 || made < 0 {
		return "", nil
	}
	cur := tbl.Schema()
	if cur.ID != made {
		return fmt.Sprintf("kept: the schema changed again after snapshot %d (schema %d is current, it made %d)", target.SnapshotID, cur.ID, made), nil
	}
	var before *iceberg.Schema
	for _, s := range tbl.Metadata().Schemas() {
		if s.ID == was {
			before = s
		}
	}
	if before == nil {
		return fmt.Sprintf("kept: schema %d, the one before snapshot %d, is no longer in the table's metadata", was, target.SnapshotID), nil
	}
	var addedIDs []int
	var addedNames []string
	for _, f := range cur.Fields() {
		if _, ok := before.FindFieldByID(f.ID); !ok {
			addedIDs = append(addedIDs, f.ID)
			addedNames = append(addedNames, f.Name)
		}
	}
	if len(addedIDs) == 0 {
		return fmt.Sprintf("kept: snapshot %d changed the schema without adding columns", target.SnapshotID), nil
	}

	// Files that were in the table before target cannot hold the columns
	// it added (their ids are new); any other file the undo leaves must
	// say, in its statistics, that it holds only nulls in them.
	beforeFiles, err := FilesOf(ctx, tbl.Scan(table.WithSnapshotID(parent.SnapshotID)))
	if err != nil {
		return "", err
	}
	old := make(map[string]bool, len(beforeFiles))
	for _, df := range beforeFiles {
		old[df.FilePath()] = true
	}
	removed := make(map[string]bool, len(remove))
	for _, df := range remove {
		removed[df.FilePath()] = true
	}
	valued := 0
	for path, df := range live {
		if old[path] || removed[path] {
			continue
		}
		if holdsValues(df, addedIDs) {
			valued++
		}
	}
	cols := strings.Join(addedNames, ", ")
	if valued > 0 {
		return fmt.Sprintf("kept: %d files the table keeps hold values in the columns snapshot %d added (%s), or do not say; hiding those columns would hide their data",
			valued, target.SnapshotID, cols), nil
	}
	us := tx.UpdateSchema(true, true)
	for _, n := range addedNames {
		us = us.DeleteColumn([]string{n})
	}
	preview, err := us.Apply()
	if err != nil || !preview.Equals(before) {
		return fmt.Sprintf("kept: hiding the columns snapshot %d added (%s) does not give back schema %d", target.SnapshotID, cols, was), nil
	}
	if err := us.Commit(); err != nil {
		return "", fmt.Errorf("restore schema %d of %s: %w", was, Name(tbl.Identifier()), err)
	}
	return fmt.Sprintf("restored: schema %d is current again (columns %s hidden)", was, cols), nil
}

// holdsValues reports whether a data file may hold a non-null value in
// one of the fields: its statistics say so, or say nothing about it.
func holdsValues(df iceberg.DataFile, fields []int) bool {
	values, nulls := df.ValueCounts(), df.NullValueCounts()
	for _, id := range fields {
		v, ok := values[id]
		if !ok {
			return true
		}
		n, ok := nulls[id]
		if !ok || n < v {
			return true
		}
	}
	return false
}
