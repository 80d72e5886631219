package split

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/retrain-ml/retrain/internal/lake"
)

// duckDB runs DuckDB, through the peer benchmark's Node.js script, when
// it is installed; the test skips, saying how to install it, otherwise.
// DuckDB is what users open retrain's files with: it reads them with no
// knowledge of retrain.
type duckDB struct{ script, modules string }

func needDuckDB(t *testing.T) duckDB {
	t.Helper()
	peer, err := filepath.Abs("../../benchmarks/peer")
	if err != nil {
		t.Fatal(err)
	}
	d := duckDB{script: filepath.Join(peer, "duck.mjs"), modules: os.Getenv("RETRAIN_DUCKDB_NODE_MODULES")}
	if d.modules == "" {
		d.modules = filepath.Join(peer, ".node", "node_modules")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node: DuckDB's cross-check needs Node.js and @duckdb/node-api (benchmarks/peer/run.sh installs it)")
	}
	if _, err := os.Stat(filepath.Join(d.modules, "@duckdb", "node-api", "package.json")); err != nil {
		t.Skipf("no @duckdb/node-api in %s: npm install --prefix %s @duckdb/node-api@1.5.6-r.1 (or set RETRAIN_DUCKDB_NODE_MODULES)", d.modules, filepath.Dir(d.modules))
	}
	return d
}

// checksum is DuckDB's row count and order-independent hash sum of exprs
// over the rows of from (a FROM clause).
func (d duckDB) checksum(t *testing.T, from string, exprs []string) string {
	t.Helper()
	job, err := json.Marshal(map[string]any{"mode": "checksum", "from": from, "exprs": exprs})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "job.json")
	if err := os.WriteFile(f, job, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", d.script, f)
	cmd.Env = append(os.Environ(), "DUCKDB_NODE_MODULES="+d.modules)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// dataFiles lists the local paths of a table's data files at a snapshot,
// as a DuckDB list literal.
func dataFiles(t *testing.T, cat *lake.Catalog, name string, snap int64) string {
	t.Helper()
	ctx := context.Background()
	tbl, err := cat.Load(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := tbl.Scan(table.WithSnapshotID(snap)).PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, task := range tasks {
		p := task.File.FilePath()
		if u, err := url.Parse(p); err == nil && u.Scheme == "file" {
			p = u.Path
		}
		paths = append(paths, "'"+p+"'")
	}
	if len(paths) == 0 {
		t.Fatalf("%s has no data files at snapshot %d", name, snap)
	}
	return "[" + strings.Join(paths, ", ") + "]"
}

// TestSplitJoinAgreesWithDuckDB: the split that joins a staging table on
// the fly, whatever the staging table's bucket count (16 like the
// training table, 4, 5) and with its keys renamed, holds exactly the rows
// DuckDB's left join of the same Parquet files gives: the training
// table's rows of the window, with the staged values where a staging row
// has the request's id, nulls elsewhere (day 0 has none).
func TestSplitJoinAgreesWithDuckDB(t *testing.T) {
	duck := needDuckDB(t)
	e := newJoinEnv(t)
	e.dense, e.sparse = []any{"u_activity", "u_sessions"}, []any{"user_id", "u_recent_ads"}
	ctx := context.Background()
	// Both sides hashed as one type: the split may narrow a column.
	exprs := []string{"request_id::BIGINT", "date::DATE", "label::INTEGER", "user_id::BIGINT",
		"u_activity::FLOAT", "u_sessions::FLOAT", "u_recent_ads::BIGINT[]"}
	training := dataFiles(t, e.cat, "ml.training", e.base)
	for _, c := range []struct {
		name    string
		buckets int
		rename  map[string]string
	}{
		{"16 buckets", 16, nil},
		{"4 buckets", 4, nil},
		{"5 buckets", 5, nil},
		{"renamed key", 16, map[string]string{"request_id": "requestId", "user_id": "userId"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "ml.duck_" + strings.ReplaceAll(c.name, " ", "_")
			snap := copyStaging(t, e.cat, e.user.Staging, name, c.buckets, c.rename)
			more := map[string]any{}
			rid := "request_id"
			if c.rename != nil {
				more["keys"] = map[string]any{"request_id": "requestId", "user_id": "userId"}
				rid = "requestId"
			}
			out, err := e.run(t, name, e.base, []any{entry(name, snap, more)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			data, err := Open(ctx, e.splits.Store, out["uri"].(string))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			for _, ds := range []string{TrainDataset, EvalDataset} {
				if err := data.Download(ctx, e.splits.Store, ds, filepath.Join(dir, ds)); err != nil {
					t.Fatal(err)
				}
			}
			got := duck.checksum(t, fmt.Sprintf("read_parquet('%s/*/*.parquet')", dir), exprs)
			join := fmt.Sprintf(`(SELECT t.request_id, t.date, t.label, t.user_id, s.u_activity, s.u_sessions, s.u_recent_ads
				FROM read_parquet(%s) t LEFT JOIN read_parquet(%s) s ON t.request_id = s."%s"
				WHERE t.date BETWEEN DATE '%s' AND DATE '%s')`,
				training, dataFiles(t, e.cat, name, snap), rid, e.windowStart, e.windowEnd)
			want := duck.checksum(t, join, exprs)
			t.Logf("split %s, DuckDB %s", got, want)
			if got != want {
				t.Errorf("the split's rows hash to %s, DuckDB's join of the same files to %s", got, want)
			}
			var n struct{ Rows string }
			if err := json.Unmarshal([]byte(got), &n); err != nil || n.Rows == "0" {
				t.Errorf("DuckDB read no rows of the split: %s (%v)", got, err)
			}
		})
	}
}
