package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/nodetype"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// csvRow is the shape of the test tables, read back from checkpoints.
type csvRow struct {
	ID    *int64   `parquet:"id,optional"`
	Score *float64 `parquet:"score,optional"`
	Name  *string  `parquet:"name,optional"`
}

func newCheckpoints(t *testing.T) (*Checkpoints, *s3store.Store, *s3test.Server) {
	t.Helper()
	srv := s3test.Start(t)
	st := srv.Open(t, "ck")
	return &Checkpoints{Store: st, Logger: quiet}, st, srv
}

// run runs a checkpoint node as the worker does: `with` decoded with its
// defaults, the outputs through JSON; they are read back as Outputs.
func run(ctx context.Context, c *Checkpoints, in nodetype.Input) (Outputs, error) {
	m, err := Type(c.Store, c.Logger).Run(ctx, in)
	if err != nil {
		return Outputs{}, err
	}
	var out Outputs
	if err := nodetype.Decode(m, &out); err != nil {
		return Outputs{}, err
	}
	return out, nil
}

func checkpointInput(run string, with map[string]any) nodetype.Input {
	return nodetype.Input{Pipeline: "train", RunID: run, Node: "features", Type: "checkpoint", With: with}
}

// countLines counts the lines of a file, 0 if it does not exist.
func countLines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// readBack reads a checkpoint node's dataset back, verifying it against
// its manifest on the way.
func readBack(t *testing.T, st *s3store.Store, out Outputs) []csvRow {
	t.Helper()
	rows, err := checkpoint.ReadAll[csvRow](context.Background(), st, checkpoint.Ref{Manifest: out.Manifest, Dataset: out.Dataset})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// generator is a command that prints n rows of CSV, counting its runs in
// dir/runs. On its first run it stops after pauseAt rows, touches
// dir/paused and sleeps, so that a test can kill the step mid-write.
func generator(dir string, n, pauseAt int) []any {
	script := fmt.Sprintf(`echo run >> %[1]s/runs
echo id,score,name
i=1
while [ $i -le %[2]d ]; do
  echo "$i,$i.5,n$i"
  if [ $i -eq %[3]d ] && [ ! -e %[1]s/paused ]; then touch %[1]s/paused; sleep 60; fi
  i=$((i+1))
done`, dir, n, pauseAt)
	return []any{"sh", "-c", script}
}

// TestCheckpointKilledMidWriteAndRetried kills the process running a
// checkpoint node once about half of its Parquet files are in S3. The
// retry writes one complete checkpoint with every row, deletes the killed
// attempt's files, and a rerun with the same inputs reuses it without
// running the command.
func TestCheckpointKilledMidWriteAndRetried(t *testing.T) {
	t.Parallel()
	c, st, srv := newCheckpoints(t)
	ctx := t.Context()
	dir := t.TempDir()
	const rows, perFile = 2000, 100
	in := checkpointInput("run-1", map[string]any{
		"command":       generator(dir, rows, 1200),
		"columns":       map[string]any{"id": "int64", "score": "double", "name": "string"},
		"max_file_rows": float64(perFile),
	})

	child := startChild(t, "checkpoint", srv, "ck", in)
	parquetFiles := func() []string {
		var files []string
		for o, err := range st.List(ctx, "checkpoints/") {
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(o.Key, ".parquet") {
				files = append(files, o.Key)
			}
		}
		return files
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(parquetFiles()) < rows/perFile/2 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d files written after 30s", len(parquetFiles()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	killed := parquetFiles()
	t.Logf("killed with %d of %d files in S3", len(killed), rows/perFile)
	if _, err := checkpoint.Load(ctx, st, checkpoint.Key{Pipeline: "train", Run: "run-1", Node: "features"}, "x"); err == nil {
		t.Fatal("a manifest exists after the kill")
	}

	out, err := run(ctx, c, in)
	if err != nil {
		t.Fatal(err)
	}
	if out.Reused || out.Rows != rows || out.Files != rows/perFile {
		t.Fatalf("retry outputs %v", out)
	}
	got := readBack(t, st, out)
	if len(got) != rows || *got[0].ID != 1 || *got[rows-1].Score != float64(rows)+0.5 || *got[rows-1].Name != fmt.Sprintf("n%d", rows) {
		t.Fatalf("read back %d rows, first %+v", len(got), got[0])
	}
	// Exactly one checkpoint: one manifest, the committing attempt's files,
	// none of the killed attempt's.
	var manifests []string
	for o, err := range st.List(ctx, "checkpoints/") {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(o.Key, "manifest.json") {
			manifests = append(manifests, o.Key)
		}
	}
	final := parquetFiles()
	if len(manifests) != 1 || len(final) != rows/perFile {
		t.Fatalf("%d manifests, %d files after the retry; want 1 and %d", len(manifests), len(final), rows/perFile)
	}
	for _, k := range killed {
		if slices.Contains(final, k) {
			t.Fatalf("file %s of the killed attempt survived", k)
		}
	}
	if n := countLines(t, filepath.Join(dir, "runs")); n != 2 {
		t.Fatalf("command ran %d times, want 2 (killed, retried)", n)
	}

	// The same inputs again: the work is not done again.
	again, err := run(ctx, c, in)
	if err != nil {
		t.Fatal(err)
	}
	if n := countLines(t, filepath.Join(dir, "runs")); n != 2 {
		t.Fatalf("rerun with the same inputs ran the command (%d runs)", n)
	}
	if !again.Reused || again.URI != out.URI || again.Rows != out.Rows || again.Fingerprint != out.Fingerprint {
		t.Fatalf("rerun outputs %v, first %v", again, out)
	}
	// Other inputs are another checkpoint.
	in.With["inputs"] = map[string]any{"snapshot": "42"}
	other, err := run(ctx, c, in)
	if err != nil {
		t.Fatal(err)
	}
	if other.Reused || other.Fingerprint == out.Fingerprint || countLines(t, filepath.Join(dir, "runs")) != 3 {
		t.Fatalf("new inputs: %v", other)
	}
}

// TestCheckpointSources covers CSV files with inferred types, a command
// whose output is inferred, and Parquet files copied as they are.
func TestCheckpointSources(t *testing.T) {
	t.Parallel()
	c, st, _ := newCheckpoints(t)
	ctx := t.Context()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("a.csv", "id,score,name\n1,0.5,x\n2,,y\n")
	write("b.csv", "name,id,score\nz,3,7\n,4,1e3\n")

	out, err := run(ctx, c, checkpointInput("run-csv", map[string]any{"source": dir}))
	if err != nil {
		t.Fatal(err)
	}
	if out.Rows != 4 || !slices.Equal(out.Columns, []string{"id:int64", "score:double", "name:string"}) {
		t.Fatalf("outputs %v", out)
	}
	got := readBack(t, st, out)
	if got[1].Score != nil || *got[2].Name != "z" || *got[3].Score != 1000 || *got[3].Name != "" {
		t.Fatalf("rows %+v %+v %+v", got[1], got[2], got[3])
	}

	// A changed source file is new input, not a hit.
	write("b.csv", "name,id,score\nz,3,7\n")
	out2, err := run(ctx, c, checkpointInput("run-csv", map[string]any{"source": dir}))
	if err != nil || out2.Reused || out2.Rows != 3 {
		t.Fatalf("changed source: %v, %v", out2, err)
	}

	out, err = run(ctx, c, checkpointInput("run-cmd", map[string]any{
		"command": []any{"sh", "-c", "printf 'id,flag\\n1,true\\n2,false\\n'"},
	}))
	if err != nil || out.Rows != 2 || !slices.Equal(out.Columns, []string{"id:int64", "flag:boolean"}) {
		t.Fatalf("command outputs %v, %v", out, err)
	}

	// Parquet in, the same schema and rows out.
	pq := filepath.Join(dir, "in.parquet")
	rows := []csvRow{{ID: ptr(int64(1)), Name: ptr("p")}, {ID: ptr(int64(2)), Score: ptr(2.5)}}
	if err := parquet.WriteFile(pq, rows); err != nil {
		t.Fatal(err)
	}
	out, err = run(ctx, c, checkpointInput("run-pq", map[string]any{"source": pq, "dataset": "csvRow"}))
	if err != nil || out.Rows != 2 || out.Dataset != "csvRow" {
		t.Fatalf("parquet outputs %v, %v", out, err)
	}
	if got := readBack(t, st, out); *got[0].Name != "p" || *got[1].Score != 2.5 || got[1].Name != nil {
		t.Fatalf("parquet rows %+v", got)
	}
}

// TestCheckpointBadInput: data and settings no retry can fix fail as bad
// input and leave no checkpoint behind.
func TestCheckpointBadInput(t *testing.T) {
	t.Parallel()
	c, st, _ := newCheckpoints(t)
	ctx := t.Context()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("id,score\n1,0.5\n2,zero\n"), 0o644)
	ragged := filepath.Join(dir, "ragged.csv")
	os.WriteFile(ragged, []byte("id,score\n1,0.5,extra\n"), 0o644)
	cases := []struct {
		name string
		with map[string]any
	}{
		{"value not of the declared type", map[string]any{"source": bad, "columns": map[string]any{"id": "int64", "score": "double"}}},
		{"declared column missing", map[string]any{"source": bad, "columns": map[string]any{"id": "int64"}}},
		{"ragged CSV", map[string]any{"source": ragged}},
		{"no such file", map[string]any{"source": filepath.Join(dir, "nope.csv")}},
		{"unknown type", map[string]any{"source": bad, "columns": map[string]any{"id": "decimal", "score": "double"}}},
		{"not parquet", map[string]any{"source": bad, "format": "parquet"}},
		{"missing program", map[string]any{"command": []any{"/nonexistent/program"}}},
		{"bad command output", map[string]any{"command": []any{"printf", "id\\nx\\n"}, "columns": map[string]any{"id": "int64"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(ctx, c, checkpointInput("run-bad", tc.with))
			if nodetest.ErrType(err) != errtype.BadInput {
				t.Fatalf("error %v, want a %s error", err, errtype.BadInput)
			}
		})
	}
	for o, err := range st.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("bad input left %s", o.Key)
	}

	// A failing command is worth retrying, whatever it printed, and
	// leaves nothing either.
	for _, script := range []string{"echo a; echo 1; exit 3", "exit 3", "echo a; echo x,y; exit 3"} {
		_, err := run(ctx, c, checkpointInput("run-bad", map[string]any{"command": []any{"sh", "-c", script}}))
		if err == nil || nodetest.ErrType(err) == errtype.BadInput || !strings.Contains(err.Error(), "code 3") {
			t.Fatalf("failing command %q: %v", script, err)
		}
	}
	none := &Checkpoints{Logger: quiet}
	if _, err := run(ctx, none, checkpointInput("run", map[string]any{"source": bad})); nodetest.ErrType(err) != errtype.NoObjectStore {
		t.Fatalf("checkpoint without a store: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
