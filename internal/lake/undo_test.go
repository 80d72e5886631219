package lake_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// undoEnv is a bucketed table holding rows of three days (20400..20402),
// into which the tests "promote": replace days' partitions with their rows
// changed, optionally adding a column w, as promote_features does.
type undoEnv struct {
	t    *testing.T
	cat  *lake.Catalog
	dir  string
	base []row
	name string
}

func newUndoEnv(t *testing.T) *undoEnv {
	t.Helper()
	e := &undoEnv{t: t, dir: t.TempDir(), name: "ml.training", base: rows(90, 0)}
	e.cat = openLake(t, lake.Config{DataDir: e.dir})
	if _, err := e.cat.CreateTable(context.Background(), e.name, testSchema(), bucketed()); err != nil {
		t.Fatal(err)
	}
	write(t, e.cat, e.name, e.base)
	return e
}

// promote replaces the partitions of days with their rows, v scaled by
// factor; with addW it adds column w (and fills it with v) in the same
// commit; if the table has w already, w is filled with wValue (nil: null).
// It returns the new snapshot's id.
func (e *undoEnv) promote(days []int32, factor float64, addW bool, wValue *float64) int64 {
	e.t.Helper()
	ctx := context.Background()
	var rs []row
	for _, r := range e.base {
		for _, d := range days {
			if r.day == d {
				r.v *= factor
				rs = append(rs, r)
			}
		}
	}
	var snap int64
	tbl, err := e.cat.Update(ctx, e.name, func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		if addW {
			if err := tx.UpdateSchema(true, false).AddColumn([]string{"w"}, iceberg.PrimitiveTypes.Float64, "", false, nil).Commit(); err != nil {
				return err
			}
		}
		staged, err := tx.StagedTable()
		if err != nil {
			return err
		}
		schema, rec := recordW(e.t, staged.Table, rs, addW, wValue)
		add, err := lake.WriteFiles(ctx, staged.Table, schema, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
		if err != nil {
			return err
		}
		var del []iceberg.DataFile
		existing, err := lake.FilesOf(ctx, tbl.Scan())
		if err != nil {
			return err
		}
		for _, df := range existing {
			for _, d := range days {
				if partDay(df) == d {
					del = append(del, df)
				}
			}
		}
		return lake.ReplaceFiles(ctx, tx, del, add, iceberg.Properties{"test.promotion": "yes"})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	snap = tbl.CurrentSnapshot().SnapshotID
	return snap
}

// recordW is record with a column w when the table has one: v itself with
// fillFromV, else wValue (nil: null).
func recordW(t testing.TB, tbl *table.Table, rs []row, fillFromV bool, wValue *float64) (*arrow.Schema, arrow.RecordBatch) {
	t.Helper()
	schema, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range rs {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.Int64Builder).Append(r.user)
		b.Field(2).(*array.Date32Builder).Append(arrow.Date32(r.day))
		b.Field(3).(*array.Float64Builder).Append(r.v)
		if len(schema.Fields()) > 4 {
			w := b.Field(4).(*array.Float64Builder)
			switch {
			case fillFromV:
				w.Append(r.v)
			case wValue != nil:
				w.Append(*wValue)
			default:
				w.AppendNull()
			}
		}
	}
	return schema, b.NewRecordBatch()
}

// sum is the checksum of the rows of days (all days if none), over the
// given columns (all of the current schema if none).
func (e *undoEnv) sum(days []int32, cols ...string) lake.Checksum {
	e.t.Helper()
	ctx := context.Background()
	tbl, err := e.cat.Load(ctx, e.name)
	if err != nil {
		e.t.Fatal(err)
	}
	var opts []table.ScanOption
	if len(days) > 0 {
		var f iceberg.BooleanExpression = iceberg.AlwaysFalse{}
		for _, d := range days {
			f = iceberg.NewOr(f, iceberg.EqualTo(iceberg.Reference("date"), iceberg.Date(d)))
		}
		opts = append(opts, table.WithRowFilter(f))
	}
	if len(cols) > 0 {
		opts = append(opts, table.WithSelectedFields(cols...))
	}
	s, err := lake.TableChecksum(ctx, tbl, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *undoEnv) table() *table.Table {
	e.t.Helper()
	tbl, err := e.cat.Load(context.Background(), e.name)
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl
}

func (e *undoEnv) undo(snap int64, opts lake.UndoOptions) lake.UndoResult {
	e.t.Helper()
	res, err := e.cat.UndoCommit(context.Background(), e.name, snap, opts)
	if err != nil {
		e.t.Fatalf("undo %d: %v", snap, err)
	}
	return res
}

var (
	d0 = []int32{20400}
	d1 = []int32{20401}
	d2 = []int32{20402}
)

// TestUndoMovesMainWhenNothingLanded: the promotion is main's head, so
// undoing it moves main back and restores the schema, metadata only; run
// again, it changes nothing and reports the same.
func TestUndoMovesMainWhenNothingLanded(t *testing.T) {
	e := newUndoEnv(t)
	before := e.sum(nil)
	base := e.table().CurrentSnapshot().SnapshotID
	p := e.promote(d0, 10, true, nil)
	res := e.undo(p, lake.UndoOptions{Parent: base})
	if res.Action != lake.UndoMovedMain || res.From != p || res.To != base || !res.SchemaRestored || res.Already || res.Removed != 0 {
		t.Fatalf("undo %+v", res)
	}
	if after := e.sum(nil); after.Digest != before.Digest || strings.Join(after.Columns, ",") != strings.Join(before.Columns, ",") {
		t.Fatalf("after undo %+v, before %+v", after, before)
	}
	snaps := len(lake.Snapshots(e.table()))
	again := e.undo(p, lake.UndoOptions{Parent: base})
	if !sameReport(again, res) || !again.Already {
		t.Fatalf("again %+v, first %+v", again, res)
	}
	if n := len(lake.Snapshots(e.table())); n != snaps {
		t.Errorf("a second undo made snapshots: %d, was %d", n, snaps)
	}
	// Refused: the parent given is not the promotion's.
	if _, err := e.cat.UndoCommit(context.Background(), e.name, p, lake.UndoOptions{Parent: p}); err == nil || !strings.Contains(err.Error(), "was made on snapshot") {
		t.Errorf("wrong parent: %v", err)
	}
	if _, err := e.cat.UndoCommit(context.Background(), e.name, 12345, lake.UndoOptions{}); !errors.Is(err, lake.ErrNoSuchSnapshot) {
		t.Errorf("unknown snapshot: %v", err)
	}
}

// TestUndoKeepsLaterCommits: run A promotes day 0, run B day 1 after it
// (both with values in the new column w), and A is undone: day 1 is
// exactly as B left it, day 0 as before A, in a new snapshot; the schema
// keeps w because B's rows hold values in it. Run again: nothing changes,
// the same report.
func TestUndoKeepsLaterCommits(t *testing.T) {
	e := newUndoEnv(t)
	base := e.table().CurrentSnapshot().SnapshotID
	day0Before := e.sum(d0, "id", "user_id", "date", "v")
	a := e.promote(d0, 10, true, nil)
	aFiles := len(filesAddedBy(t, e.table(), a))
	b := e.promote(d1, 100, false, ptr(7.0))
	day1After := e.sum(d1)
	day2After := e.sum(d2)

	// The old rule refuses: main is not at A's snapshot.
	if _, err := e.cat.UndoCommit(context.Background(), e.name, a, lake.UndoOptions{Parent: base, MoveOnly: true}); !errors.Is(err, lake.ErrLaterCommits) {
		t.Fatalf("move only: %v", err)
	}
	if head := e.table().CurrentSnapshot().SnapshotID; head != b {
		t.Fatalf("the refused undo moved main to %d", head)
	}

	res := e.undo(a, lake.UndoOptions{Parent: base})
	t.Logf("undo: %+v", res)
	if res.Action != lake.UndoReverted || res.From != b || res.To == b || res.Removed != aFiles || res.Restored == 0 ||
		res.Kept != 0 || res.SchemaRestored || !strings.HasPrefix(res.Schema, "kept: ") || !strings.Contains(res.Schema, "w") {
		t.Fatalf("undo %+v (A added %d files)", res, aFiles)
	}
	if got := e.sum(d1); got.Digest != day1After.Digest || got.Rows != day1After.Rows {
		t.Errorf("day 1 (B's) changed: %+v, was %+v", got, day1After)
	}
	if got := e.sum(d2); got.Digest != day2After.Digest {
		t.Errorf("day 2 changed: %+v, was %+v", got, day2After)
	}
	if got := e.sum(d0, "id", "user_id", "date", "v"); got.Digest != day0Before.Digest || got.Rows != day0Before.Rows {
		t.Errorf("day 0 is not as before A: %+v, want %+v", got, day0Before)
	}
	if n := nonNullW(t, e, d0); n != 0 {
		t.Errorf("day 0 still has %d values of A's column w", n)
	}
	if n := nonNullW(t, e, d1); n != int64(e.sum(d1).Rows) {
		t.Errorf("day 1 lost values of w: %d of %d", n, e.sum(d1).Rows)
	}
	snaps := len(lake.Snapshots(e.table()))
	again := e.undo(a, lake.UndoOptions{Parent: base})
	if !again.Already || !sameReport(again, res) {
		t.Fatalf("again %+v, first %+v", again, res)
	}
	if n := len(lake.Snapshots(e.table())); n != snaps {
		t.Errorf("a second undo made snapshots: %d, was %d", n, snaps)
	}
	// Undoing B now takes out B's files and gives day 1 back as before B.
	resB := e.undo(b, lake.UndoOptions{})
	if resB.Action != lake.UndoReverted || resB.Removed == 0 {
		t.Fatalf("undo B %+v", resB)
	}
	if got, want := e.sum(nil, "id", "user_id", "date", "v"), sumOf(t, e.base); got.Digest != want.Digest {
		t.Errorf("after both undos %+v, want the base rows %+v", got, want)
	}
}

// TestUndoRestoresSchemaWhenSafe: the later commit's files hold only nulls
// in the column the promotion added, so the schema before it comes back.
func TestUndoRestoresSchemaWhenSafe(t *testing.T) {
	e := newUndoEnv(t)
	schema0 := e.table().Schema().ID
	a := e.promote(d0, 10, true, nil)
	e.promote(d1, 100, false, nil) // w null throughout
	day1 := e.sum(d1, "id", "user_id", "date", "v")
	res := e.undo(a, lake.UndoOptions{})
	if res.Action != lake.UndoReverted || !res.SchemaRestored || !strings.HasPrefix(res.Schema, "restored") {
		t.Fatalf("undo %+v", res)
	}
	tbl := e.table()
	if tbl.Schema().ID != schema0 || schemaOfSnap(tbl.CurrentSnapshot()) != schema0 {
		t.Errorf("schema %d (snapshot records %d), want %d", tbl.Schema().ID, schemaOfSnap(tbl.CurrentSnapshot()), schema0)
	}
	if got := e.sum(d1); got.Digest != day1.Digest || len(got.Columns) != 4 {
		t.Errorf("day 1 %+v, want %+v", got, day1)
	}
}

// TestUndoLeavesRewrittenPartitions: A promotes days 0 and 1, then B
// rewrites day 1 (replacing A's files there). Undoing A reverts day 0
// only; day 1's rows are B's and stay; the result says so. When B rewrote
// everything A wrote, the undo has nothing to do.
func TestUndoLeavesRewrittenPartitions(t *testing.T) {
	e := newUndoEnv(t)
	day0Before := e.sum(d0)
	a := e.promote([]int32{20400, 20401}, 10, false, nil)
	e.promote(d1, 100, false, nil)
	day1 := e.sum(d1)
	res := e.undo(a, lake.UndoOptions{})
	t.Logf("undo: %+v", res)
	if res.Action != lake.UndoReverted || res.KeptPartitions == 0 || res.Gone == 0 || res.Kept != 0 || res.Removed == 0 ||
		!strings.Contains(res.Note, "rewritten by later commits") || res.Schema != "" {
		t.Fatalf("undo %+v", res)
	}
	if got := e.sum(d1); got.Digest != day1.Digest {
		t.Errorf("day 1 changed: %+v, was %+v", got, day1)
	}
	if got := e.sum(d0); got.Digest != day0Before.Digest {
		t.Errorf("day 0 %+v, want %+v", got, day0Before)
	}
	if again := e.undo(a, lake.UndoOptions{}); !again.Already || !sameReport(again, res) {
		t.Errorf("again %+v, first %+v", again, res)
	}

	f := newUndoEnv(t)
	a = f.promote(d2, 10, false, nil)
	f.promote(d2, 100, false, nil)
	head := f.table().CurrentSnapshot().SnapshotID
	res = f.undo(a, lake.UndoOptions{})
	if res.Action != lake.UndoNothing || res.Gone == 0 || res.From != head || res.To != head {
		t.Fatalf("undo of a fully rewritten promotion %+v", res)
	}
	if now := f.table().CurrentSnapshot().SnapshotID; now != head {
		t.Errorf("main moved to %d", now)
	}
}

// TestUndoRedoesAfterLosingARace: another writer commits between the
// undo's plan and its commit, twice: first while main is still at the
// promotion (the move back would undo it), then while the revert is
// planned. Each time the commit fails and the undo is planned again on
// the fresh table; the writer's rows stay.
func TestUndoRedoesAfterLosingARace(t *testing.T) {
	e := newUndoEnv(t)
	them := openLake(t, lake.Config{DataDir: e.dir}) // another process: its own locks
	a := e.promote(d0, 10, false, nil)
	calls := 0
	var opts lake.UndoOptions
	lake.SetBeforeUndoCommit(&opts, func() {
		calls++
		if calls <= 2 {
			write(t, them, e.name, rows(3, int64(1000*calls)))
		}
	})
	res := e.undo(a, opts)
	if calls != 3 || res.Action != lake.UndoReverted || res.Removed == 0 {
		t.Fatalf("undo after %d commit attempts: %+v", calls, res)
	}
	if got := e.sum(nil); got.Rows != int64(len(e.base)+6) {
		t.Errorf("%d rows, want %d: the other writer's rows were lost", got.Rows, len(e.base)+6)
	}
	if got, want := e.sum(d0), sumOf(t, dayRows(append(e.base, append(rows(3, 1000), rows(3, 2000)...)...), 20400)); got.Digest != want.Digest {
		t.Errorf("day 0 %+v, want %+v", got, want)
	}
}

// TestUndoTwoAtOnce: two processes undo the same promotion at once; one
// commits the revert, the other finds it and reports the same.
func TestUndoTwoAtOnce(t *testing.T) {
	e := newUndoEnv(t)
	other := openLake(t, lake.Config{DataDir: e.dir})
	a := e.promote(d0, 10, false, nil)
	e.promote(d1, 100, false, nil)
	var wg sync.WaitGroup
	results := make([]lake.UndoResult, 2)
	errs := make([]error, 2)
	for i, cat := range []*lake.Catalog{e.cat, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = cat.UndoCommit(context.Background(), e.name, a, lake.UndoOptions{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("undo %d: %v", i, err)
		}
	}
	if results[0].To != results[1].To || results[0].Removed != results[1].Removed || results[0].Already == results[1].Already {
		t.Fatalf("results %+v", results)
	}
	reverts := 0
	for _, s := range lake.Snapshots(e.table()) {
		if s.Summary[lake.PropUndoOf] != "" {
			reverts++
		}
	}
	if reverts != 1 {
		t.Errorf("%d reverting snapshots, want 1", reverts)
	}
}

// TestUndoRefusesMissingFiles: a file the promotion replaced is gone from
// storage; the undo fails naming it and changes nothing.
func TestUndoRefusesMissingFiles(t *testing.T) {
	e := newUndoEnv(t)
	ctx := context.Background()
	var old []string
	files, err := lake.FilesOf(ctx, e.table().Scan(table.WithRowFilter(iceberg.EqualTo(iceberg.Reference("date"), iceberg.Date(20400)))))
	if err != nil {
		t.Fatal(err)
	}
	for _, df := range files {
		old = append(old, df.FilePath())
	}
	a := e.promote(d0, 10, false, nil)
	e.promote(d1, 100, false, nil)
	head := e.table().CurrentSnapshot().SnapshotID
	if err := os.Remove(strings.TrimPrefix(old[0], "file://")); err != nil {
		t.Fatal(err)
	}
	_, err = e.cat.UndoCommit(ctx, e.name, a, lake.UndoOptions{})
	if err == nil || !strings.Contains(err.Error(), "gone from storage") {
		t.Fatalf("undo: %v", err)
	}
	if now := e.table().CurrentSnapshot().SnapshotID; now != head {
		t.Errorf("main moved to %d", now)
	}
}

func ptr[T any](v T) *T { return &v }

// sameReport: two undo results report the same, whether or not one found
// the work done already.
func sameReport(a, b lake.UndoResult) bool {
	a.Already, a.Metadata, b.Already, b.Metadata = false, "", false, ""
	return a == b
}

// partDay is the day of a data file's date partition (-1 if none).
func partDay(df iceberg.DataFile) int32 {
	switch v := df.Partition()[1000].(type) {
	case iceberg.Date:
		return int32(v)
	case int32:
		return v
	}
	return -1
}

func schemaOfSnap(s *table.Snapshot) int {
	if s == nil || s.SchemaID == nil {
		return -1
	}
	return *s.SchemaID
}

func dayRows(rs []row, day int32) []row {
	var out []row
	for _, r := range rs {
		if r.day == day {
			out = append(out, r)
		}
	}
	return out
}

// sumOf is the checksum of rows in a scratch table of the test schema.
func sumOf(t *testing.T, rs []row) lake.Checksum {
	t.Helper()
	cat := openLake(t, lake.Config{DataDir: t.TempDir()})
	if _, err := cat.CreateTable(context.Background(), "x.y", testSchema(), bucketed()); err != nil {
		t.Fatal(err)
	}
	write(t, cat, "x.y", rs)
	return checksum(t, cat, "x.y")
}

// nonNullW counts the rows of days with a value in w.
func nonNullW(t *testing.T, e *undoEnv, days []int32) int64 {
	t.Helper()
	ctx := context.Background()
	var f iceberg.BooleanExpression = iceberg.AlwaysFalse{}
	for _, d := range days {
		f = iceberg.NewOr(f, iceberg.EqualTo(iceberg.Reference("date"), iceberg.Date(d)))
	}
	_, recs, err := e.table().Scan(table.WithRowFilter(f), table.WithSelectedFields("id", "w")).ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for rec, err := range recs {
		if err != nil {
			t.Fatal(err)
		}
		col := rec.Column(int(rec.Schema().FieldIndices("w")[0]))
		n += int64(col.Len() - col.NullN())
		rec.Release()
	}
	return n
}

// filesAddedBy lists the data files snapshot snap added.
func filesAddedBy(t *testing.T, tbl *table.Table, snap int64) []string {
	t.Helper()
	ctx := context.Background()
	tasks, err := tbl.Scan(table.WithSnapshotID(snap)).PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	added, err := lake.AddedBy(ctx, tbl, snap, tasks)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range added {
		out = append(out, task.File.FilePath())
	}
	return out
}
