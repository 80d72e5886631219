package checkpoint_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
)

type sample struct {
	ID    int64   `parquet:"id"`
	Label string  `parquet:"label"`
	Score float64 `parquet:"score"`
}

func samples(n int) []sample {
	rows := make([]sample, n)
	for i := range rows {
		rows[i] = sample{ID: int64(i), Label: fmt.Sprintf("label-%d", i%7), Score: float64(i) / 3}
	}
	return rows
}

// outputs is what the test steps return: Refs to their datasets, and a
// value computed by the step.
type outputs struct {
	Train checkpoint.Ref `json:"train"`
	Count int            `json:"count"`
}

const (
	crashRows     = 10_000
	crashFileRows = 1_000
)

var crashKey = checkpoint.Key{Pipeline: "fraud", Run: "run-1", Node: "features"}

// writeSamples is the step under test: it writes crashRows rows in files of
// crashFileRows rows. afterRows, if set, is called after each Write.
func writeSamples(w *checkpoint.Writer, afterRows func(int)) (outputs, error) {
	d, err := checkpoint.Create[sample](w, "train", checkpoint.Options{MaxFileRows: crashFileRows})
	if err != nil {
		return outputs{}, err
	}
	rows := samples(crashRows)
	for i := 0; i < len(rows); i += 500 {
		if _, err := d.Write(rows[i : i+500]); err != nil {
			return outputs{}, err
		}
		if afterRows != nil {
			afterRows(i + 500)
		}
	}
	ref, err := d.Close()
	return outputs{Train: ref, Count: len(rows)}, err
}

// TestMain doubles as the step process that TestKilledStepIsRetried kills.
func TestMain(m *testing.M) {
	if os.Getenv("CHECKPOINT_TEST_CRASH_STEP") == "1" {
		crashingStep()
		return
	}
	os.Exit(m.Run())
}

func crashingStep() {
	ctx := context.Background()
	st, err := s3store.Open(ctx, s3store.Config{
		URI:             os.Getenv("CHECKPOINT_TEST_URI"),
		Endpoint:        os.Getenv("CHECKPOINT_TEST_ENDPOINT"),
		UsePathStyle:    true,
		AccessKeyID:     os.Getenv("CHECKPOINT_TEST_ACCESS"),
		SecretAccessKey: os.Getenv("CHECKPOINT_TEST_SECRET"),
	})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	checkpoint.Do(ctx, st, crashKey, "inputs-v1", func(ctx context.Context, w *checkpoint.Writer) (outputs, error) {
		return writeSamples(w, func(rows int) {
			// Half the files are uploaded and the next one is being
			// encoded: tell the test, which kills this process.
			if rows == crashRows/2+500 {
				fmt.Println("HALF")
				select {}
			}
		})
	})
	fmt.Println("ERROR step finished")
	os.Exit(1)
}

func TestKilledStepIsRetried(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "ckpt")
	ctx := t.Context()
	dir := "checkpoints/fraud/run-1/features/inputs-v1/"

	// First attempt: a separate process, killed (SIGKILL, no cleanup)
	// after writing half its files.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"CHECKPOINT_TEST_CRASH_STEP=1",
		"CHECKPOINT_TEST_URI="+srv.URI("ckpt"),
		"CHECKPOINT_TEST_ENDPOINT="+srv.Endpoint,
		"CHECKPOINT_TEST_ACCESS="+srv.AccessKey,
		"CHECKPOINT_TEST_SECRET="+srv.SecretKey,
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if strings.TrimSpace(line) != "HALF" {
		t.Fatalf("crashing step said %q", line)
	}
	// The last finished file may still have been uploading.
	crashed := keysUnder(t, st, dir)
	if n := len(crashed); n < crashRows/crashFileRows/2-1 || n > crashRows/crashFileRows/2 || slices.Contains(crashed, dir+"manifest.json") {
		t.Fatalf("after the crash the checkpoint holds %q, want %d files and no manifest", crashed, crashRows/crashFileRows/2)
	}
	if _, err := checkpoint.Load(ctx, st, crashKey, "inputs-v1"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Load of the crashed checkpoint = %v, want ErrNotFound", err)
	}

	// The retry ignores the crashed attempt's files and completes.
	var calls atomic.Int32
	step := func(ctx context.Context, w *checkpoint.Writer) (outputs, error) {
		calls.Add(1)
		return writeSamples(w, nil)
	}
	out, hit, err := checkpoint.Do(ctx, st, crashKey, "inputs-v1", step)
	if err != nil {
		t.Fatal(err)
	}
	if hit || calls.Load() != 1 || out.Count != crashRows {
		t.Fatalf("retry: hit=%t calls=%d out=%+v", hit, calls.Load(), out)
	}

	// Exactly one complete checkpoint: one manifest, the files it names,
	// and nothing left of the crashed attempt.
	m, err := checkpoint.Load(ctx, st, crashKey, "inputs-v1")
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := m.Dataset("train")
	if m.Rows != crashRows || ds.Rows != crashRows || len(ds.Files) != crashRows/crashFileRows {
		t.Fatalf("manifest: rows %d, dataset rows %d, %d files", m.Rows, ds.Rows, len(ds.Files))
	}
	want := []string{dir + "manifest.json"}
	for _, f := range ds.Files {
		if f.Rows != crashFileRows || f.Size == 0 || f.CRC32C == "" {
			t.Errorf("manifest file entry %+v", f)
		}
		want = append(want, f.Key)
	}
	slices.Sort(want)
	sizes := map[string]int64{}
	for o, err := range st.List(ctx, dir) {
		if err != nil {
			t.Fatal(err)
		}
		sizes[o.Key] = o.Size
	}
	for _, f := range ds.Files {
		if sizes[f.Key] != f.Size {
			t.Errorf("%s is %d bytes, manifest says %d", f.Key, sizes[f.Key], f.Size)
		}
	}
	if got := keysUnder(t, st, dir); !slices.Equal(got, want) {
		t.Errorf("checkpoint holds\n%q\nwant\n%q", got, want)
	}
	rows, err := checkpoint.ReadAll[sample](ctx, st, out.Train)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows, samples(crashRows)) {
		t.Fatalf("read back %d rows that differ from those written", len(rows))
	}

	// A rerun with the same inputs skips the work.
	again, hit, err := checkpoint.Do(ctx, st, crashKey, "inputs-v1", step)
	if err != nil {
		t.Fatal(err)
	}
	if !hit || calls.Load() != 1 || again != out {
		t.Fatalf("rerun: hit=%t calls=%d outputs %+v, want a hit with %+v and no call", hit, calls.Load(), again, out)
	}
	// Other inputs are another checkpoint.
	if _, hit, err := checkpoint.Do(ctx, st, crashKey, "inputs-v2", step); err != nil || hit || calls.Load() != 2 {
		t.Fatalf("new inputs: hit=%t calls=%d err=%v", hit, calls.Load(), err)
	}
}

func keysUnder(t *testing.T, st *s3store.Store, prefix string) []string {
	t.Helper()
	var keys []string
	for o, err := range st.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

func TestConcurrentAttemptsCommitOnce(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	key := checkpoint.Key{Pipeline: "p", Run: "r", Node: "n"}
	const n = 4
	var wg sync.WaitGroup
	results := make([]outputs, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			results[i], _, errs[i] = checkpoint.Do(t.Context(), st, key, "fp", func(ctx context.Context, w *checkpoint.Writer) (outputs, error) {
				ref, err := checkpoint.WriteAll(w, "train", samples(100+i))
				return outputs{Train: ref, Count: 100 + i}, err
			})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("attempt %d: %v", i, errs[i])
		}
		if results[i] != results[0] {
			t.Errorf("attempt %d returned %+v, attempt 0 %+v", i, results[i], results[0])
		}
	}
	m, err := checkpoint.Load(t.Context(), st, key, "fp")
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := m.Dataset("train")
	if ds.Rows != int64(results[0].Count) {
		t.Errorf("manifest has %d rows, winner wrote %d", ds.Rows, results[0].Count)
	}
	rows, err := checkpoint.ReadAll[sample](t.Context(), st, results[0].Train)
	if err != nil || len(rows) != results[0].Count {
		t.Fatalf("read %d rows, %v; want %d", len(rows), err, results[0].Count)
	}
	// Losers removed their files.
	for _, k := range keysUnder(t, st, "checkpoints/") {
		if !strings.HasSuffix(k, "manifest.json") && !strings.Contains(k, "/"+m.Attempt+"/") {
			t.Errorf("file of a losing attempt left behind: %s", k)
		}
	}
}

func TestDatasets(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	key := checkpoint.Key{Pipeline: "p", Run: "r", Node: "split"}
	type split struct {
		Train, Test, Empty checkpoint.Ref
	}
	out, _, err := checkpoint.Do(t.Context(), st, key, "fp", func(ctx context.Context, w *checkpoint.Writer) (split, error) {
		var s split
		var err error
		if s.Train, err = checkpoint.WriteAll(w, "train", samples(300)); err != nil {
			return s, err
		}
		if s.Test, err = checkpoint.WriteAll(w, "test", samples(30)); err != nil {
			return s, err
		}
		s.Empty, err = checkpoint.WriteAll(w, "empty", []sample{})
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for ref, n := range map[checkpoint.Ref]int{out.Train: 300, out.Test: 30, out.Empty: 0} {
		rows, err := checkpoint.ReadAll[sample](t.Context(), st, ref)
		if err != nil || len(rows) != n {
			t.Errorf("%s: %d rows, %v; want %d", ref.Dataset, len(rows), err, n)
		}
	}
	// ReadRows: the same rows as parquet values, in the file's columns.
	for ref, n := range map[checkpoint.Ref]int{out.Train: 300, out.Empty: 0} {
		ids, err := readRowIDs(t, st, ref)
		if err != nil || len(ids) != n {
			t.Errorf("%s read as parquet rows: %d rows, %v; want %d", ref.Dataset, len(ids), err, n)
		}
		for i, id := range ids {
			if id != int64(i) {
				t.Fatalf("%s row %d: id %d read as a parquet row", ref.Dataset, i, id)
			}
		}
	}
	m, _ := checkpoint.Load(t.Context(), st, key, "fp")
	if m.Rows != 330 || len(m.Datasets) != 3 || !strings.Contains(m.Datasets[0].Schema, "label") {
		t.Errorf("manifest rows=%d datasets=%d schema=%q", m.Rows, len(m.Datasets), m.Datasets[0].Schema)
	}
	wantCols := []checkpoint.Column{{Name: "id", Type: "int64"}, {Name: "label", Type: "string"}, {Name: "score", Type: "double"}}
	if ds, _ := m.Dataset("train"); !slices.Equal(ds.Columns, wantCols) {
		t.Errorf("manifest columns %v, want %v", ds.Columns, wantCols)
	}
	if _, err := checkpoint.Open[sample](t.Context(), st, checkpoint.Ref{Manifest: out.Train.Manifest, Dataset: "nope"}); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Open of a missing dataset = %v, want ErrNotFound", err)
	}
}

// readRowIDs reads a dataset of samples with ReadRows, in batches of 64,
// and returns the id column, found by name in the Reader's schema.
func readRowIDs(t *testing.T, st *s3store.Store, ref checkpoint.Ref) ([]int64, error) {
	t.Helper()
	r, err := checkpoint.Open[any](t.Context(), st, ref)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var ids []int64
	buf := make([]parquet.Row, 64)
	for {
		n, err := r.ReadRows(buf)
		if n > 0 {
			leaf, ok := r.Schema().Lookup("id")
			if !ok {
				t.Fatalf("schema %s has no id column", r.Schema())
			}
			for _, row := range buf[:n] {
				for _, v := range row {
					if v.Column() == leaf.ColumnIndex {
						ids = append(ids, v.Int64())
					}
				}
			}
		}
		if err == io.EOF {
			return ids, nil
		}
		if err != nil {
			return ids, err
		}
	}
}

func TestFailedStepLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	key := checkpoint.Key{Pipeline: "p", Run: "r", Node: "n"}
	boom := errors.New("boom")
	_, _, err := checkpoint.Do(t.Context(), st, key, "fp", func(ctx context.Context, w *checkpoint.Writer) (outputs, error) {
		if _, err := checkpoint.WriteAll(w, "done", samples(10)); err != nil {
			return outputs{}, err
		}
		d, _ := checkpoint.Create[sample](w, "half", checkpoint.Options{MaxFileRows: 5})
		d.Write(samples(12)) // two files uploaded, a third in flight
		return outputs{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want the step's error", err)
	}
	_, _, err = checkpoint.Do(t.Context(), st, key, "fp2", func(ctx context.Context, w *checkpoint.Writer) (outputs, error) {
		d, _ := checkpoint.Create[sample](w, "unclosed")
		d.Write(samples(3))
		return outputs{}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "unclosed") {
		t.Fatalf("Do with an unclosed dataset = %v", err)
	}
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Errorf("failed steps left %q", keys)
	}
}

func TestPanickingStepLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the step's panic", p)
			}
		}()
		checkpoint.Do(t.Context(), st, checkpoint.Key{Pipeline: "p", Run: "r", Node: "n"}, "fp",
			func(ctx context.Context, w *checkpoint.Writer) (int, error) {
				d, _ := checkpoint.Create[sample](w, "half", checkpoint.Options{MaxFileRows: 5})
				d.Write(samples(12))
				panic("boom")
			})
	}()
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Errorf("panicking step left %q", keys)
	}
}

func TestCorruptionIsDetected(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	ctx := t.Context()
	key := checkpoint.Key{Pipeline: "p", Run: "r", Node: "n"}
	var calls int
	step := func(ctx context.Context, w *checkpoint.Writer) (outputs, error) {
		calls++
		return writeSamples(w, nil)
	}
	out, _, err := checkpoint.Do(ctx, st, key, "fp", step)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := checkpoint.Load(ctx, st, key, "fp")
	files := m.Datasets[0].Files

	// A byte flipped on the server's disk: the server's checksum no longer
	// matches.
	path := filepath.Join(srv.Root, srv.Bucket, filepath.FromSlash(files[3].Key))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte{b[100] ^ 1}, 100)
	f.Close()
	if _, err := checkpoint.ReadAll[sample](ctx, st, out.Train); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("ReadAll after bit flip = %v, want ErrCorrupt", err)
	}
	if _, err := readRowIDs(t, st, out.Train); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("ReadRows after bit flip = %v, want ErrCorrupt", err)
	}

	// A file replaced through S3 by a valid object of the same size: only
	// the manifest's checksum can tell.
	orig, _, err := st.GetBytes(ctx, files[1].Key)
	if err != nil {
		t.Fatal(err)
	}
	repl := slices.Clone(orig)
	repl[len(repl)/2] ^= 1
	if _, err := st.PutBytes(ctx, files[1].Key, repl); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.ReadAll[sample](ctx, st, out.Train); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("ReadAll after replacement = %v, want ErrCorrupt", err)
	}

	// A missing file: the checkpoint is not a hit any more; the step runs
	// again and replaces it.
	if err := st.Delete(ctx, files[5].Key); err != nil {
		t.Fatal(err)
	}
	out2, hit, err := checkpoint.Do(ctx, st, key, "fp", step)
	if err != nil || hit || calls != 2 {
		t.Fatalf("Do over a broken checkpoint: hit=%t calls=%d err=%v", hit, calls, err)
	}
	if rows, err := checkpoint.ReadAll[sample](ctx, st, out2.Train); err != nil || len(rows) != crashRows {
		t.Fatalf("after recomputing: %d rows, %v", len(rows), err)
	}
}

func TestGC(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "gc")
	ctx := t.Context()
	step := func(ctx context.Context, w *checkpoint.Writer) (outputs, error) {
		ref, err := checkpoint.WriteAll(w, "train", samples(10))
		return outputs{Train: ref}, err
	}
	old := checkpoint.Key{Pipeline: "p", Run: "old", Node: "n"}
	fresh := checkpoint.Key{Pipeline: "p", Run: "fresh", Node: "n"}
	for _, k := range []checkpoint.Key{old, fresh} {
		if _, _, err := checkpoint.Do(ctx, st, k, "fp", step); err != nil {
			t.Fatal(err)
		}
	}
	// An old crashed attempt, a recent crashed attempt (perhaps still
	// running), and an old stale attempt beside the fresh checkpoint.
	for _, k := range []string{
		"checkpoints/p/crashed/n/fp/a1/train-00000.parquet",
		"checkpoints/p/running/n/fp/a1/train-00000.parquet",
		"checkpoints/p/fresh/n/fp/stale/train-00000.parquet",
	} {
		if _, err := st.PutBytes(ctx, k, []byte("partial")); err != nil {
			t.Fatal(err)
		}
	}
	// Age objects by setting their files' modification times, which the
	// POSIX backend reports as LastModified.
	age := func(prefix string) {
		root := filepath.Join(srv.Root, srv.Bucket, "gc", filepath.FromSlash(prefix))
		past := time.Now().Add(-48 * time.Hour)
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				os.Chtimes(path, past, past)
			}
			return nil
		})
	}
	age("checkpoints/p/old")
	age("checkpoints/p/crashed")
	age("checkpoints/p/fresh/n/fp/stale")

	report, err := checkpoint.GC(ctx, st, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := checkpoint.GCReport{Complete: 2, Incomplete: 2, DeletedComplete: 1, DeletedIncomplete: 1, DeletedAttempts: 1, DeletedObjects: 4}
	report.DeletedBytes = 0
	if report != want {
		t.Errorf("GC report %+v, want %+v", report, want)
	}
	var left []string
	for _, k := range keysUnder(t, st, "checkpoints/") {
		left = append(left, strings.Join(strings.Split(k, "/")[:3], "/"))
	}
	left = slices.Compact(left)
	if want := []string{"checkpoints/p/fresh", "checkpoints/p/running"}; !slices.Equal(left, want) {
		t.Errorf("after GC: %q, want %q", left, want)
	}
	if _, hit, err := checkpoint.Do(ctx, st, fresh, "fp", step); err != nil || !hit {
		t.Errorf("fresh checkpoint after GC: hit=%t err=%v", hit, err)
	}

	applied, err := checkpoint.SetRetention(ctx, st, 7)
	if err != nil || applied {
		t.Errorf("SetRetention on versitygw = %t, %v; want false, nil", applied, err)
	}
}

func TestValidation(t *testing.T) {
	srv := s3test.Start(t)
	st := srv.Open(t, "")
	step := func(ctx context.Context, w *checkpoint.Writer) (int, error) { return 1, nil }
	for _, k := range []checkpoint.Key{
		{Pipeline: "", Run: "r", Node: "n"},
		{Pipeline: "p", Run: "..", Node: "n"},
		{Pipeline: "p", Run: "r", Node: "a/b"},
		{Pipeline: "p\n", Run: "r", Node: "n"},
	} {
		if _, _, err := checkpoint.Do(t.Context(), st, k, "fp", step); err == nil {
			t.Errorf("Do accepted key %+v", k)
		}
	}
	for _, fp := range []string{"", "..", "a/b", "has space", strings.Repeat("x", 129)} {
		if _, _, err := checkpoint.Do(t.Context(), st, checkpoint.Key{Pipeline: "p", Run: "r", Node: "n"}, fp, step); err == nil {
			t.Errorf("Do accepted fingerprint %q", fp)
		}
	}
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Errorf("rejected calls wrote %q", keys)
	}
}

func TestFingerprint(t *testing.T) {
	a, err := checkpoint.Fingerprint(map[string]any{"b": 2, "a": []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := checkpoint.Fingerprint(map[string]any{"a": []string{"x"}, "b": 2})
	c, _ := checkpoint.Fingerprint(map[string]any{"a": []string{"y"}, "b": 2})
	if a != b || a == c || len(a) != 32 {
		t.Errorf("fingerprints %q %q %q", a, b, c)
	}
	if _, err := checkpoint.Fingerprint(func() {}); err == nil {
		t.Error("Fingerprint of a func succeeded")
	}
}
