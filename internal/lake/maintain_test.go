package lake_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/lake"
)

const dailyTable = "ml.daily"

// dailyLake is a lake with a table partitioned by bucket(4, user_id) only,
// so that every daily write adds a small file to each of the 4 partitions.
func dailyLake(t *testing.T, dir string) *lake.Catalog {
	t.Helper()
	return dailyLakeOf(t, lake.Config{DataDir: dir})
}

func dailyLakeOf(t *testing.T, cfg lake.Config) *lake.Catalog {
	t.Helper()
	cat := openLake(t, cfg)
	spec := iceberg.NewPartitionSpec(iceberg.PartitionField{SourceIDs: []int{2}, FieldID: 1000, Name: "user_bucket", Transform: iceberg.BucketTransform{NumBuckets: 4}})
	if _, err := cat.CreateTable(context.Background(), dailyTable, testSchema(), lake.TableSpec{Partition: &spec}); err != nil {
		t.Fatal(err)
	}
	return cat
}

func snapshotChecksum(t *testing.T, cat *lake.Catalog, id int64) lake.Checksum {
	t.Helper()
	tbl, err := cat.Load(context.Background(), dailyTable)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := lake.TableChecksum(context.Background(), tbl, table.WithSnapshotID(id))
	if err != nil {
		t.Fatalf("read snapshot %d: %v", id, err)
	}
	return sum
}

// writeUncommitted writes data files as a promotion does before its commit
// and commits nothing: a killed attempt leaves exactly these behind.
func writeUncommitted(t *testing.T, cat *lake.Catalog, rs []row) []string {
	t.Helper()
	ctx := context.Background()
	tbl, err := cat.Load(ctx, dailyTable)
	if err != nil {
		t.Fatal(err)
	}
	schema, rec := record(t, tbl, rs)
	files, err := lake.WriteFiles(ctx, tbl, schema, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, strings.TrimPrefix(f.FilePath(), "file://"))
	}
	return paths
}

// TestMaintainSixtyDailyRuns is the table of a year's daily retrain, cut
// to 60 days: 60 commits of small files, two model versions trained on
// days 10 and 30, a promotion attempt killed four days ago and one in
// flight now. `table maintain --expire-older-than 0 --keep-last 3
// --remove-orphans --compact` leaves the head, the snapshots rolling back
// the last 3 runs needs and the models' snapshots; one file per
// partition; the same rows; the killed attempt's files gone and the
// in-flight one's kept.
func TestMaintainSixtyDailyRuns(t *testing.T) {
	ctx := context.Background()
	cat := dailyLake(t, t.TempDir())
	var snaps []int64
	for day := 1; day <= 60; day++ {
		tbl := write(t, cat, dailyTable, rows(40, int64(day)*1000))
		snaps = append(snaps, tbl.CurrentSnapshot().SnapshotID)
	}
	sums := map[int64]lake.Checksum{}
	for _, i := range []int{9, 29, 56, 57, 58, 59} {
		sums[snaps[i]] = snapshotChecksum(t, cat, snaps[i])
	}
	models := map[int64]string{snaps[9]: "model ctr@v1 trained on it", snaps[29]: "model ctr@v2 trained on it"}
	killed := writeUncommitted(t, cat, rows(40, 900_000))
	old := time.Now().Add(-4 * 24 * time.Hour)
	for _, p := range killed {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	inFlight := writeUncommitted(t, cat, rows(40, 800_000))
	head := checksum(t, cat, dailyTable)

	opts := lake.MaintainOptions{Expire: true, ExpireOlderThan: 0, KeepLast: 3, Keep: models, RemoveOrphans: true, Compact: true}
	dry := opts
	dry.DryRun = true
	dres, err := cat.MaintainTable(ctx, dailyTable, dry)
	if err != nil {
		t.Fatal(err)
	}
	if dres.After != dres.Before || len(dres.Expired) == 0 || dres.Compaction.Groups != 4 || len(dres.Orphans.Removed) != len(killed) {
		t.Errorf("dry run: %+v compaction %+v orphans %d", dres, *dres.Compaction, len(dres.Orphans.Removed))
	}
	for _, p := range killed {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("dry run removed %s: %v", p, err)
		}
	}

	start := time.Now()
	res, err := cat.MaintainTable(ctx, dailyTable, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("60 daily runs, table maintain --expire-older-than 0 --keep-last 3 --remove-orphans --compact (%s):", time.Since(start).Round(time.Millisecond))
	t.Logf("  snapshots %d -> %d (expired %d, kept for a reason %d)", res.Before.Snapshots, res.After.Snapshots, len(res.Expired), len(res.Kept))
	t.Logf("  data files in main %d -> %d; files under the table %d (%d B) -> %d (%d B)", res.Before.DataFiles, res.After.DataFiles,
		res.Before.Files, res.Before.Bytes, res.After.Files, res.After.Bytes)
	t.Logf("  compaction: %d groups, %d files (%d B) -> %d files (%d B), snapshot %d", res.Compaction.Groups, res.Compaction.FilesBefore,
		res.Compaction.BytesBefore, res.Compaction.FilesAfter, res.Compaction.BytesAfter, res.Compaction.Snapshot)
	t.Logf("  orphans removed %d (%d B), younger than the margin kept %d", len(res.Orphans.Removed), res.Orphans.Bytes, res.Orphans.Young)

	// The head, the last 3 runs and the parent of the oldest, 2 models.
	if res.Before.Snapshots != 60 || res.After.Snapshots != 1+4+2 {
		t.Errorf("snapshots %d -> %d, want 60 -> 7", res.Before.Snapshots, res.After.Snapshots)
	}
	if res.After.DataFiles != 4 || res.Before.DataFiles < 200 || res.After.Files >= res.Before.Files {
		t.Errorf("data files %d -> %d (want 4: one per partition), files %d -> %d", res.Before.DataFiles, res.After.DataFiles, res.Before.Files, res.After.Files)
	}
	after := checksum(t, cat, dailyTable)
	if after.Digest != head.Digest || after.Rows != head.Rows {
		t.Errorf("maintenance changed the rows: %+v -> %+v", head, after)
	}
	for id, want := range sums {
		if got := snapshotChecksum(t, cat, id); got.Digest != want.Digest || got.Rows != want.Rows {
			t.Errorf("kept snapshot %d reads %+v, was %+v", id, got, want)
		}
	}
	tbl, err := cat.Load(ctx, dailyTable)
	if err != nil {
		t.Fatal(err)
	}
	if tbl.SnapshotByID(snaps[19]) != nil {
		t.Errorf("day 20's snapshot %d (no model, not among the last runs) was kept", snaps[19])
	}
	for _, p := range killed {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("orphan of the killed attempt %s still there: %v", p, err)
		}
	}
	for _, p := range inFlight {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("file of the attempt in flight %s removed: %v", p, err)
		}
	}
	if res.Orphans.Young < len(inFlight) {
		t.Errorf("younger orphans %d, want at least the %d in flight", res.Orphans.Young, len(inFlight))
	}

	// Rolling back the last run (to its previous_snapshot_id) still works,
	// and so does going back to a model's snapshot, whose parents are gone.
	for _, to := range []int64{snaps[58], snaps[9]} {
		if _, err := cat.Rollback(ctx, dailyTable, to); err != nil {
			t.Fatalf("rollback to kept snapshot %d: %v", to, err)
		}
		if got := checksum(t, cat, dailyTable); got.Digest != sums[to].Digest || got.Rows != sums[to].Rows {
			t.Errorf("after rollback to %d the table reads %+v, want %+v", to, got, sums[to])
		}
	}
	if _, err := cat.Rollback(ctx, dailyTable, res.Compaction.Snapshot); err != nil {
		t.Fatal(err)
	}

	// Maintained: a second pass finds nothing to compact or expire.
	again, err := cat.MaintainTable(ctx, dailyTable, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.Compaction.Groups != 0 || len(again.Expired) != 0 || again.After.Snapshots != res.After.Snapshots {
		t.Errorf("second pass: compaction %+v, expired %v", *again.Compaction, again.Expired)
	}

	// Three more nights of a run then maintenance: the pre-compaction
	// snapshots the last runs needed age out of the window, and with them
	// the small files only they referenced; the models' snapshots stay.
	var night lake.MaintainResult
	for day := 61; day <= 63; day++ {
		write(t, cat, dailyTable, rows(40, int64(day)*1000))
		if night, err = cat.MaintainTable(ctx, dailyTable, opts); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("  three nights later (a run, then maintenance, each night): snapshots %d, data files in main %d, files under the table %d (%d B)",
		night.After.Snapshots, night.After.DataFiles, night.After.Files, night.After.Bytes)
	// On main: 3 runs, the 3 compactions after them and the snapshot before
	// the oldest run (the earlier compaction); and the 2 models'.
	if night.After.Files >= res.After.Files || night.After.DataFiles != 4 || night.After.Snapshots != 7+2 {
		t.Errorf("after three nights: %+v (first maintenance left %+v)", night.After, res.After)
	}
	for _, i := range []int{9, 29} {
		if got := snapshotChecksum(t, cat, snaps[i]); got.Digest != sums[snaps[i]].Digest {
			t.Errorf("model snapshot %d changed: %+v", snaps[i], got)
		}
	}
}

// TestMaintainCompactionReplansOnACommit: a daily write lands between the
// compaction's rewrite and its commit. The compaction commits nothing,
// plans again with the new file and lands; no row is lost or doubled.
func TestMaintainCompactionReplansOnACommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat := dailyLake(t, dir)
	them := openLake(t, lake.Config{DataDir: dir}) // another process
	for day := 1; day <= 5; day++ {
		write(t, cat, dailyTable, rows(40, int64(day)*1000))
	}
	opts := lake.MaintainOptions{Compact: true}
	lake.SetBeforeCompactCommit(&opts, func(round int) {
		if round == 1 {
			write(t, them, dailyTable, rows(40, 6000))
		}
	})
	res, err := cat.MaintainTable(ctx, dailyTable, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Compaction.Rounds != 2 || res.After.DataFiles != 4 {
		t.Errorf("compaction rounds %d, data files %d; want 2 rounds, 4 files", res.Compaction.Rounds, res.After.DataFiles)
	}
	if sum := checksum(t, cat, dailyTable); sum.Rows != 6*40 {
		t.Errorf("%d rows after compaction, want %d", sum.Rows, 6*40)
	}
	tbl, err := cat.Load(ctx, dailyTable)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tbl.Metadata().Snapshots()); n != 7 {
		t.Errorf("%d snapshots, want 6 writes + 1 compaction", n)
	}
}

// TestMaintainRefusesBadInput: nothing changes on a bad request.
func TestMaintainRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	cat := dailyLake(t, t.TempDir())
	write(t, cat, dailyTable, rows(40, 0))
	write(t, cat, dailyTable, rows(40, 1000))
	if _, err := cat.MaintainTable(ctx, "ml.nope", lake.MaintainOptions{Compact: true}); !errors.Is(err, lake.ErrNoSuchTable) {
		t.Errorf("missing table: %v", err)
	}
	for _, o := range []lake.MaintainOptions{
		{},
		{Expire: true, KeepLast: -1},
		{Expire: true, ExpireOlderThan: -time.Hour},
		{RemoveOrphans: true, OrphanMargin: -time.Minute, Compact: true},
	} {
		if _, err := cat.MaintainTable(ctx, dailyTable, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	tbl, err := cat.Load(ctx, dailyTable)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tbl.Metadata().Snapshots()); n != 2 {
		t.Errorf("%d snapshots after refused requests, want 2", n)
	}
}

// TestMaintainS3Warehouse: the same upkeep on an S3 warehouse (versitygw),
// where a file's age is its object's LastModified: the orphans of an
// attempt older than the margin are deleted, those of one younger are
// kept, compaction and expiry delete what no kept snapshot references.
func TestMaintainS3Warehouse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	srv := s3test.Start(t)
	ctx := context.Background()
	cat := dailyLakeOf(t, lake.Config{
		URI: "file:" + t.TempDir() + "/catalog.db", Warehouse: srv.URI("warehouse"),
		S3: lake.S3Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey},
	})
	for day := 1; day <= 6; day++ {
		write(t, cat, dailyTable, rows(40, int64(day)*1000))
	}
	head := checksum(t, cat, dailyTable)
	// The margin leaves the in-flight attempt's files young for the whole
	// upkeep: with a 2 s margin, a CI machine running every package at once
	// took longer than that to reach the orphan scan, and removed them.
	const margin = 8 * time.Second
	killed := writeUncommitted(t, cat, rows(40, 900_000))
	time.Sleep(margin + 2500*time.Millisecond) // S3 times have whole seconds
	inFlight := writeUncommitted(t, cat, rows(40, 800_000))
	has := func(path string) bool {
		for _, k := range srv.Keys(t) {
			if strings.HasSuffix(path, "/"+k) {
				return true
			}
		}
		return false
	}
	res, err := cat.MaintainTable(ctx, dailyTable, lake.MaintainOptions{Expire: true, KeepLast: 0, RemoveOrphans: true, OrphanMargin: margin, Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("S3: snapshots %d -> %d, data files %d -> %d, objects %d -> %d, orphans removed %d, younger kept %d",
		res.Before.Snapshots, res.After.Snapshots, res.Before.DataFiles, res.After.DataFiles, res.Before.Files, res.After.Files,
		len(res.Orphans.Removed), res.Orphans.Young)
	// KeepLast 0: the compaction alone, and only its 4 files of data.
	if res.After.Snapshots != 1 || res.After.DataFiles != 4 || res.After.Files >= res.Before.Files {
		t.Errorf("after: %+v, before: %+v", res.After, res.Before)
	}
	if sum := checksum(t, cat, dailyTable); sum.Digest != head.Digest || sum.Rows != head.Rows {
		t.Errorf("rows changed: %+v -> %+v", head, sum)
	}
	for _, p := range killed {
		if has(p) {
			t.Errorf("orphan older than the margin kept: %s", p)
		}
	}
	for _, p := range inFlight {
		if !has(p) {
			t.Errorf("orphan younger than the margin removed: %s", p)
		}
	}
}
