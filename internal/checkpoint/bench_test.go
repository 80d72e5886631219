package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// event is a typical row of intermediate training data: ids, numbers, a
// low-cardinality string and a random token that does not compress.
type event struct {
	ID      int64   `parquet:"id"`
	UserID  int64   `parquet:"user_id"`
	TS      int64   `parquet:"ts"`
	Amount  float64 `parquet:"amount"`
	Score   float32 `parquet:"score"`
	Country string  `parquet:"country"`
	Token   string  `parquet:"token"`
	Label   bool    `parquet:"label"`
}

const benchRows = 1 << 20

func benchEvents() []event {
	r := rand.New(rand.NewPCG(1, 2))
	countries := []string{"DE", "FR", "US", "BR", "IN", "JP", "NG", "GB"}
	rows := make([]event, benchRows)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for i := range rows {
		rows[i] = event{
			ID:      int64(i),
			UserID:  r.Int64N(1_000_000),
			TS:      start + int64(i)*37 + r.Int64N(30),
			Amount:  r.ExpFloat64() * 40,
			Score:   r.Float32(),
			Country: countries[r.IntN(len(countries))],
			Token:   fmt.Sprintf("%016x", r.Uint64()),
			Label:   r.IntN(50) == 0,
		}
	}
	return rows
}

func benchStore(b *testing.B, srv *s3test.Server) *s3store.Store {
	cfg := srv.Config("bench")
	cfg.Logger = slog.New(slog.DiscardHandler)
	st, err := s3store.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	return st
}

type benchOut struct {
	Events checkpoint.Ref `json:"events"`
}

func writeEvents(ctx context.Context, st *s3store.Store, run string, rows []event) (benchOut, error) {
	key := checkpoint.Key{Pipeline: "bench", Run: run, Node: "events"}
	out, _, err := checkpoint.Do(ctx, st, key, "fp", func(ctx context.Context, w *checkpoint.Writer) (benchOut, error) {
		ref, err := checkpoint.WriteAll(w, "events", rows)
		return benchOut{Events: ref}, err
	})
	return out, err
}

// BenchmarkCheckpointWrite measures checkpointing a dataset (Parquet
// encoding, upload, manifest) against a raw transfer-manager upload of the
// same Parquet bytes to the same server, with the same part size,
// concurrency and checksum. Iterations alternate between the two so that
// both see the same machine load. Metrics: ckpt-MB/s and raw-MB/s over
// the Parquet bytes, and their ratio.
func BenchmarkCheckpointWrite(b *testing.B) {
	srv := s3test.Start(b)
	st := benchStore(b, srv)
	ctx := context.Background()
	rows := benchEvents()

	// The Parquet files one checkpoint of rows consists of.
	out, err := writeEvents(ctx, st, "setup", rows)
	if err != nil {
		b.Fatal(err)
	}
	files := parquetFiles(b, st, out.Events)
	var size int64
	for _, f := range files {
		size += int64(len(f))
	}
	tm := transfermanager.New(srv.Client(), func(o *transfermanager.Options) {
		o.PartSizeBytes = 8 << 20
		o.MultipartUploadThreshold = 16 << 20
		o.Concurrency = 4
		o.ChecksumAlgorithm = tmtypes.ChecksumAlgorithmCrc32c
	})

	var ckpt, raw time.Duration
	n := 0
	b.SetBytes(size)
	for b.Loop() {
		start := time.Now()
		if _, err := writeEvents(ctx, st, fmt.Sprintf("run-%d", n), rows); err != nil {
			b.Fatal(err)
		}
		ckpt += time.Since(start)

		b.StopTimer()
		start = time.Now()
		for i, f := range files {
			_, err := tm.UploadObject(ctx, &transfermanager.UploadObjectInput{
				Bucket:            aws.String(srv.Bucket),
				Key:               aws.String(fmt.Sprintf("raw/%d/%d.parquet", n, i)),
				Body:              bytes.NewReader(f),
				ChecksumAlgorithm: tmtypes.ChecksumAlgorithmCrc32c,
				ChecksumType:      tmtypes.ChecksumTypeFullObject,
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		raw += time.Since(start)
		n++
		b.StartTimer()
	}
	mb := float64(size) * float64(n) / 1e6
	b.ReportMetric(mb/ckpt.Seconds(), "ckpt-MB/s")
	b.ReportMetric(mb/raw.Seconds(), "raw-MB/s")
	b.ReportMetric(raw.Seconds()/ckpt.Seconds(), "ratio")
	b.ReportMetric(float64(benchRows)*float64(n)/ckpt.Seconds(), "rows/s")
}

// BenchmarkCheckpointRead measures streaming a dataset back (download,
// verification, Parquet decoding) over the Parquet bytes, and a plain
// verified GET of the same files for reference.
func BenchmarkCheckpointRead(b *testing.B) {
	srv := s3test.Start(b)
	st := benchStore(b, srv)
	ctx := context.Background()
	out, err := writeEvents(ctx, st, "read", benchEvents())
	if err != nil {
		b.Fatal(err)
	}
	m, err := checkpoint.Load(ctx, st, checkpoint.Key{Pipeline: "bench", Run: "read", Node: "events"}, "fp")
	if err != nil {
		b.Fatal(err)
	}
	ds, _ := m.Dataset("events")
	var size int64
	for _, f := range ds.Files {
		size += f.Size
	}

	var read, get time.Duration
	n := 0
	buf := make([]event, 8192)
	b.SetBytes(size)
	for b.Loop() {
		start := time.Now()
		r, err := checkpoint.Open[event](ctx, st, out.Events)
		if err != nil {
			b.Fatal(err)
		}
		rows := 0
		for {
			k, err := r.Read(buf)
			rows += k
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		r.Close()
		if rows != benchRows {
			b.Fatalf("read %d rows, want %d", rows, benchRows)
		}
		read += time.Since(start)

		b.StopTimer()
		start = time.Now()
		for _, f := range ds.Files {
			body, _, err := st.Get(ctx, f.Key)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, body); err != nil {
				b.Fatal(err)
			}
			body.Close()
		}
		get += time.Since(start)
		n++
		b.StartTimer()
	}
	mb := float64(size) * float64(n) / 1e6
	b.ReportMetric(mb/read.Seconds(), "read-MB/s")
	b.ReportMetric(mb/get.Seconds(), "get-MB/s")
	b.ReportMetric(float64(benchRows)*float64(n)/read.Seconds(), "rows/s")
}

func parquetFiles(b *testing.B, st *s3store.Store, ref checkpoint.Ref) [][]byte {
	m, err := checkpoint.Load(context.Background(), st, checkpoint.Key{Pipeline: "bench", Run: "setup", Node: "events"}, "fp")
	if err != nil {
		b.Fatal(err)
	}
	ds, _ := m.Dataset(ref.Dataset)
	var files [][]byte
	for _, f := range ds.Files {
		data, _, err := st.GetBytes(context.Background(), f.Key)
		if err != nil {
			b.Fatal(err)
		}
		files = append(files, data)
	}
	return files
}
