package lake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// fakeS3 serves GETs of objects with Range (a-b and suffix -n), counting
// requests; stall makes the first n GETs send half their body and hang.
type fakeS3 struct {
	mu       sync.Mutex
	objects  map[string][]byte
	requests atomic.Int64
	stall    atomic.Int64
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	if debugFake {
		fmt.Println("GET", r.URL.Path, r.Header.Get("Range"))
	}
	f.mu.Lock()
	data, ok := f.objects[strings.TrimPrefix(r.URL.Path, "/b/")]
	f.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `<?xml version="1.0"?><Error><Code>NoSuchKey</Code><Message>no</Message></Error>`)
		return
	}
	size := int64(len(data))
	if size == 0 && r.Header.Get("Range") != "" {
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable) // as S3 answers a suffix of nothing
		return
	}
	start, end := int64(0), size
	status := http.StatusOK
	if rg := r.Header.Get("Range"); rg != "" {
		spec := strings.TrimPrefix(rg, "bytes=")
		a, b, _ := strings.Cut(spec, "-")
		if a == "" {
			n, _ := strconv.ParseInt(b, 10, 64)
			start = max(0, size-n)
		} else {
			start, _ = strconv.ParseInt(a, 10, 64)
			if b != "" {
				e, _ := strconv.ParseInt(b, 10, 64)
				end = min(size, e+1)
			}
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end-1, size))
		status = http.StatusPartialContent
	}
	body := data[start:end]
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if f.stall.Add(-1) >= 0 {
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the client gives up
		return
	}
	w.Write(body)
}

var debugFake = false

func startFake(t *testing.T, cfg ReadConfig) (*fakeS3, *s3Reads) {
	t.Helper()
	f := &fakeS3{objects: map[string][]byte{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	awsCfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("key", "secret", ""),
		BaseEndpoint: aws.String(srv.URL),
		HTTPClient:   srv.Client(),
	}
	return f, newS3Reads(&awsCfg, srv.URL, nil, cfg, slog.New(slog.DiscardHandler))
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestS3FileSmallFilesWhole: a file within the tail is one GET, one within
// WholeFileBytes two; random ranges read back what was stored, and reads
// after the open send nothing.
func TestS3FileSmallFilesWhole(t *testing.T) {
	f, r := startFake(t, ReadConfig{TailBytes: 1000, WholeFileBytes: 5000})
	for _, tc := range []struct {
		size     int
		requests int64
	}{{0, 2}, {700, 1}, {1000, 1}, {4321, 2}} {
		data := randomBytes(tc.size, uint64(tc.size))
		key := fmt.Sprintf("w/data/f%d.parquet", tc.size)
		f.objects[key] = data
		f.requests.Store(0)
		sf, err := openS3File(context.Background(), r, "s3://b/"+key, "b", key)
		if err != nil {
			t.Fatalf("size %d: %v", tc.size, err)
		}
		checkRanges(t, sf, data)
		if got := f.requests.Load(); got != tc.requests {
			t.Errorf("size %d: %d requests, want %d", tc.size, got, tc.requests)
		}
		sf.Close()
	}
}

// checkRanges reads random ranges of sf and compares them with want.
func checkRanges(t *testing.T, sf *s3File, want []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		if len(want) == 0 {
			break
		}
		off := rng.Int64N(int64(len(want)))
		n := rng.IntN(len(want)) + 1
		p := make([]byte, n)
		got, err := sf.ReadAt(p, off)
		wantN := min(n, len(want)-int(off))
		if got != wantN || (got < n && err != io.EOF) || (got == n && err != nil) {
			t.Fatalf("read %d: ReadAt(%d bytes at %d) = %d, %v; want %d bytes", i, n, off, got, err, wantN)
		}
		if !bytes.Equal(p[:got], want[off:off+int64(got)]) {
			t.Fatalf("read %d: %d bytes at %d differ from the object's", i, n, off)
		}
	}
	if fi, _ := sf.Stat(); fi.Size() != int64(len(want)) {
		t.Errorf("Stat size %d, want %d", fi.Size(), len(want))
	}
}

// parquetFile writes rows rows of cols int64 columns in row groups of
// rowGroup rows, uncompressed (so the file is large for its rows).
func parquetFile(t *testing.T, cols, rows, rowGroup int) ([]byte, *arrow.Schema) {
	t.Helper()
	var fields []arrow.Field
	for c := range cols {
		fields = append(fields, arrow.Field{Name: fmt.Sprintf("c%d", c), Type: arrow.PrimitiveTypes.Int64})
	}
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	rng := rand.New(rand.NewPCG(3, 4))
	for c := range cols {
		for range rows {
			b.Field(c).(*array.Int64Builder).Append(rng.Int64())
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(schema, &buf,
		parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(int64(rowGroup)), parquet.WithDictionaryDefault(false)),
		pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), schema
}

// readColumns reads columns of every row group as iceberg-go does (arrow-go,
// columns in parallel) and returns them as a table's string form.
func readColumns(t *testing.T, src parquet.ReaderAtSeeker, columns []int) string {
	t.Helper()
	rdr, err := file.NewParquetReader(src)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{Parallel: true, BatchSize: 1 << 20}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	groups := make([]int, rdr.NumRowGroups())
	for i := range groups {
		groups[i] = i
	}
	tbl, err := fr.ReadRowGroups(context.Background(), columns, groups)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	var sb strings.Builder
	tr := array.NewTableReader(tbl, -1)
	defer tr.Release()
	for tr.Next() {
		for i, col := range tr.RecordBatch().Columns() {
			fmt.Fprintf(&sb, "%d:%v\n", i, col)
		}
	}
	return sb.String()
}

// TestS3FileLargeParquetCoalesced: a file above WholeFileBytes is read by
// chunks; a projection of 3 of 12 columns over 8 row groups reads the
// same values as from memory in far fewer GETs than one per chunk, and
// random ranges match the object's bytes.
func TestS3FileLargeParquetCoalesced(t *testing.T) {
	data, _ := parquetFile(t, 12, 16000, 2000)
	f, r := startFake(t, ReadConfig{TailBytes: 16 << 10, WholeFileBytes: 64 << 10, MergeGapBytes: 64 << 10, MaxRangeBytes: 1 << 20})
	key := "w/data/big.parquet"
	f.objects[key] = data
	if len(data) <= 64<<10 {
		t.Fatalf("test file of %d bytes is not above WholeFileBytes", len(data))
	}
	columns := []int{1, 5, 9}
	want := readColumns(t, bytes.NewReader(data), columns)
	f.requests.Store(0)
	debugFake = false // true prints each GET
	defer func() { debugFake = false }()
	sf, err := openS3File(context.Background(), r, "s3://b/"+key, "b", key)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(want, "\n") != 3 {
		t.Fatalf("read %d columns from memory, want 3", strings.Count(want, "\n"))
	}
	if got := readColumns(t, sf, columns); got != want {
		t.Fatal("projected columns read through S3 differ from the file's")
	}
	chunks := int64(8 * len(columns))
	got := f.requests.Load()
	t.Logf("%d bytes, 8 row groups x 3 of 12 columns: %d GETs (one per chunk would be %d, plus the open)", len(data), got, chunks)
	// The open, then the first row group's chunks one by one while the
	// projection is learnt, then about one GET per row group (the gaps
	// are 9 columns of ~16 KiB, within MergeGapBytes).
	if got > 1+int64(len(columns))+7*2 {
		t.Errorf("%d GETs for %d chunks: not coalesced", got, chunks)
	}
	checkRanges(t, sf, data)
	sf.Close()
}

// TestS3FileStalledBodyRetried: a GET whose headers came but whose body
// stops is cut off after StallTimeout and fetched again.
func TestS3FileStalledBodyRetried(t *testing.T) {
	f, r := startFake(t, ReadConfig{StallTimeout: 200 * time.Millisecond})
	data := randomBytes(50000, 7)
	f.objects["w/data/s.parquet"] = data
	f.stall.Store(1)
	started := time.Now()
	sf, err := openS3File(context.Background(), r, "s3://b/w/data/s.parquet", "b", "w/data/s.parquet")
	if err != nil {
		t.Fatal(err)
	}
	checkRanges(t, sf, data)
	if got := f.requests.Load(); got != 2 {
		t.Errorf("%d requests, want 2 (the stalled one and its retry)", got)
	}
	if d := time.Since(started); d < 200*time.Millisecond || d > 10*time.Second {
		t.Errorf("open took %v, want about the stall timeout", d)
	}
	// A body that always stalls fails after StallAttempts, with the cause
	// (a file the cache does not keep, or the first read would serve it).
	f.objects["w/other/s.bin"] = data
	f.stall.Store(100)
	f.requests.Store(0)
	_, err = openS3File(context.Background(), r, "s3://b/w/other/s.bin", "b", "w/other/s.bin")
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("always stalling: %v, want a stall error", err)
	}
	if got := f.requests.Load(); got != 4 {
		t.Errorf("always stalling: %d requests, want the 4 attempts", got)
	}
}

// TestS3FileMetadataCached: an immutable metadata file is fetched once per
// catalog; a missing file is fs.ErrNotExist; retrain's own overwritten
// files under metadata/ are not cached.
func TestS3FileMetadataCached(t *testing.T) {
	f, r := startFake(t, ReadConfig{})
	fsys := &s3FS{ctx: context.Background(), r: r}
	f.objects["w/metadata/snap-1-abc.avro"] = []byte("manifest list")
	f.objects["w/metadata/retrain-promotions/p/buckets-0.json"] = []byte("[]")
	for range 3 {
		for _, p := range []string{"s3://b/w/metadata/snap-1-abc.avro", "s3://b/w/metadata/retrain-promotions/p/buckets-0.json"} {
			if _, err := fsys.ReadFile(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := f.requests.Load(); got != 1+3 {
		t.Errorf("%d requests, want 1 for the manifest list and 3 for the promotion's file list", got)
	}
	if _, err := fsys.Open("s3://b/w/metadata/missing.avro"); err == nil || !strings.Contains(err.Error(), "file does not exist") {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestMetaCacheEvictsByBudget: entries go least recently used first once
// the budget is passed; an entry above a quarter of the budget is not kept.
func TestMetaCacheEvictsByBudget(t *testing.T) {
	c := newMetaCache(100)
	c.put("a", make([]byte, 25))
	c.put("b", make([]byte, 25))
	c.put("c", make([]byte, 25))
	c.put("d", make([]byte, 25))
	if _, ok := c.get("a"); !ok { // a is now the most recent
		t.Fatal("a evicted within the budget")
	}
	c.put("e", make([]byte, 25)) // evicts b, the least recent
	if _, ok := c.get("b"); ok {
		t.Error("b kept past the budget")
	}
	for _, k := range []string{"a", "c", "d", "e"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s evicted, want b evicted", k)
		}
	}
	c.put("big", make([]byte, 26))
	if _, ok := c.get("big"); ok {
		t.Error("an entry above a quarter of the budget was kept")
	}
	if n, used, _ := c.stats(); n != 4 || used != 100 {
		t.Errorf("%d entries, %d bytes; want 4, 100", n, used)
	}
	c.drop("a")
	if n, used, _ := c.stats(); n != 3 || used != 75 {
		t.Errorf("after drop: %d entries, %d bytes; want 3, 75", n, used)
	}
}

// TestImmutableFile: which paths are cached.
func TestImmutableFile(t *testing.T) {
	for p, want := range map[string]bool{
		"s3://b/w/ml/t/metadata/snap-1-1-abc.avro":             true,
		"s3://b/w/ml/t/metadata/abc-m0.avro":                   true,
		"s3://b/w/ml/t/metadata/00003-abc.metadata.json":       true,
		"s3://b/w/ml/t/data/date=2026-11-01/00001-abc.parquet": true,
		"s3://b/w/ml/t/metadata/retrain-promotions/x/b-0.json": false,
		"s3://b/w/ml/t/metadata/version-hint.text":             false,
		"s3://b/w/ml/t/other/file.parquet":                     false,
		"s3://b/w/ml/t/metadata/retrain-promotions/x/m-0.avro": false,
	} {
		if got := immutableFile(p); got != want {
			t.Errorf("immutableFile(%s) = %v, want %v", p, got, want)
		}
	}
}
