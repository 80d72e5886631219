package lake_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"
	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// TestS3WarehouseRetriesFaults writes, overwrites and reads a table whose
// warehouse is on a real S3 server (versitygw) behind a fault proxy that
// answers a fifth of the requests 503 SlowDown and resets 5% of the
// connections. Every table operation succeeds, the table holds what a
// local-disk warehouse holds after the same writes (same checksum), and
// the lake's requests went through the object store's retry policy:
// every injected SlowDown was retried and reported to S3Config.OnRetry as
// throttled, and every reset the SDK saw as a connection retry (net/http
// resends a reset GET or HEAD on a reused connection by itself, unseen).
// With iceberg-go's default client (3 attempts, a retry quota) this many
// faults fail operations, and nothing is counted.
func TestS3WarehouseRetriesFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an S3 server")
	}
	srv := s3test.Start(t)
	p, err := s3fault.Start(s3fault.Config{Target: srv.Endpoint, Seed: 11, SlowDownRate: 0.20, ResetRate: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var mu sync.Mutex
	reasons := map[string]int64{}
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{
		URI: "file:" + t.TempDir() + "/catalog.db", Warehouse: srv.URI("warehouse"),
		S3: lake.S3Config{
			Endpoint: p.URL(), Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
			MaxBackoff: 20 * time.Millisecond, // the policy's shape, not its patience, is under test
			OnRetry: func(ev s3store.RetryEvent) {
				mu.Lock()
				defer mu.Unlock()
				reasons[ev.Reason]++
			},
		},
	}, slog.New(slog.NewTextHandler(t.Output(), nil))) // the retry warnings, with -v
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	local := openLake(t, lake.Config{DataDir: t.TempDir()})

	for _, c := range []*lake.Catalog{cat, local} {
		if _, err := c.CreateTable(ctx, "t.faults", testSchema(), bucketed()); err != nil {
			t.Fatal(err)
		}
		write(t, c, "t.faults", rows(300, 0), rows(200, 300))
		overwriteRows(t, c, "t.faults", oneDay(rows(120, 50)))
	}
	got, want := checksum(t, cat, "t.faults"), checksum(t, local, "t.faults")
	// 500 rows, of which the 167 of the first day are replaced by 40.
	if got.Digest != want.Digest || got.Rows != 373 {
		t.Errorf("S3 warehouse behind faults: %+v; local warehouse: %+v (want equal, 373 rows)", got, want)
	}

	stats := p.Stats()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%v; lake retried %v", stats, reasons)
	if stats.SlowDowns == 0 || stats.Resets == 0 {
		t.Fatalf("no faults injected: %v", stats)
	}
	throttled, conn := reasons[s3store.RetryThrottled], reasons[s3store.RetryConnection]
	if throttled != stats.SlowDowns || conn > stats.Resets || conn < stats.Resets-stats.ResetReads {
		t.Fatalf("lake counted %v retries; proxy injected %d SlowDowns and %d resets, %d of them of reads",
			reasons, stats.SlowDowns, stats.Resets, stats.ResetReads)
	}
}

// oneDay keeps the rows of the first of rows' three days.
func oneDay(rs []row) []row {
	var out []row
	for _, r := range rs {
		if r.day == 20400 {
			out = append(out, r)
		}
	}
	return out
}

// overwriteRows replaces the partitions rs falls in with rs (dynamic
// partition overwrite), v negated so that the table changes.
func overwriteRows(t *testing.T, cat *lake.Catalog, name string, rs []row) {
	t.Helper()
	for i := range rs {
		rs[i].v = -rs[i].v
	}
	_, err := cat.Update(context.Background(), name, func(ctx context.Context, tbl *table.Table, tx *table.Transaction) error {
		schema, rec := record(t, tbl, rs)
		files, err := lake.WriteFiles(ctx, tbl, schema, func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) })
		if err != nil {
			return err
		}
		return lake.OverwritePartitions(ctx, tbl, tx, files, nil)
	})
	if err != nil {
		t.Fatalf("overwrite %s: %v", name, err)
	}
}

// TestS3WarehouseRefusesBadIOProperties: the S3 catalog properties that
// iceberg-go would have read itself are checked by Open, with a message
// naming the property.
func TestS3WarehouseRefusesBadIOProperties(t *testing.T) {
	for prop, val := range map[string]string{"s3.connect-timeout": "-3", "s3.proxy-uri": "not a url", "s3.remote-signing-enabled": "true"} {
		_, err := lake.Open(t.Context(), lake.Config{
			URI: "file:" + t.TempDir() + "/catalog.db", Warehouse: "s3://bucket/wh",
			S3:    lake.S3Config{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"},
			Props: map[string]string{prop: val},
		}, nil)
		if err == nil || !strings.Contains(err.Error(), prop) {
			t.Errorf("%s=%s: Open = %v, want an error naming the property", prop, val, err)
		}
	}
}
