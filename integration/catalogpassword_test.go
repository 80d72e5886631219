package integration

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// TestCatalogPasswordNeverShown: a worker whose PostgreSQL catalog is
// unreachable fails the lake node with an error naming the catalog's host,
// database and user; the password, in any of the forms a catalog URI
// carries one, is nowhere in the run's history (workflow ids included),
// `retrain status`, the HTML report or the worker's log.
func TestCatalogPasswordNeverShown(t *testing.T) {
	const pw = "Pg-Weak-summer2026"
	for name, uri := range map[string]string{
		"userinfo": "postgres://retrain:" + pw + "@127.0.0.1:1/cat?connect_timeout=1",
		"query":    "postgres://retrain@127.0.0.1:1/cat?connect_timeout=1&password=" + pw,
		"dsn":      "host=127.0.0.1 port=1 dbname=cat user=retrain password=" + pw + " connect_timeout=1",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			queue := newQueue(t)
			var logs lockedLog
			cfg := worker.Config{TaskQueue: queue, Lake: lake.Config{URI: uri, Warehouse: "file://" + t.TempDir()}, AllowInlineSpecs: true}
			cfg.Env.PassEnv = testPassEnv
			w, err := worker.New(context.Background(), tclient, server.Namespace(), cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Stop)
			res := runRequest(t, runs.Request{SpecFile: "catalog.yaml", TaskQueue: queue, Spec: []byte(`
name: catalog
nodes:
  - id: rollback
    type: rollback_table
    retry: {max_attempts: 1}
    with: {table: ml.training, to: "1"}
`)}, 2*time.Minute)
			wantStatus(t, res, runs.StatusFailed)
			n := node(t, res, "rollback")
			if !strings.Contains(n.Error, "PostgreSQL catalog (host 127.0.0.1:1, database cat, user retrain) is unreachable") {
				t.Errorf("node error %q: want it to name the catalog", n.Error)
			}
			seen := map[string]string{"node error": n.Error, "logs": logs.String()}
			var hist strings.Builder
			for _, id := range []string{res.ID} {
				it := tclient.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
				for it.HasNext() {
					ev, err := it.Next()
					if err != nil {
						t.Fatal(err)
					}
					b, _ := protojson.Marshal(ev)
					hist.Write(b)
				}
			}
			seen["history"] = hist.String()
			if !strings.Contains(hist.String(), "is unreachable") {
				t.Errorf("history holds no catalog error: the check below would prove nothing")
			}
			out, _ := retrainCLI(t, "status", res.ID)
			seen["retrain status"] = out
			report := filepath.Join(t.TempDir(), "r.html")
			if _, err := retrainCLI(t, "report", res.ID, "--out", report); err != nil {
				t.Fatal(err)
			}
			html, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			seen["report"] = string(html)
			if !strings.Contains(string(html), "127.0.0.1:1") {
				t.Errorf("the report does not show the node's error: the check below would prove nothing")
			}
			for where, text := range seen {
				if strings.Contains(text, pw) || strings.Contains(text, "summer2026") {
					t.Errorf("%s shows the catalog password:\n%s", where, text)
				}
			}
		})
	}
}
