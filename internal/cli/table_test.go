package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	app := &App{Out: &out, Err: &errOut, LogLevel: "warn"}
	root := NewRoot(app, "retrain")
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("retrain %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// TestTableCommands drives `retrain data demo` and `retrain table ...`
// against a lake in a temp data dir.
func TestTableCommands(t *testing.T) {
	dir := t.TempDir()
	out := runCLI(t, "data", "demo", "--data-dir", dir, "--rows", "800", "--days", "2", "--users", "100", "--ads", "20")
	if !strings.Contains(out, "wrote 800 training rows (2026-11-01..2026-11-02)") {
		t.Errorf("data demo: %s", out)
	}
	sum := runCLI(t, "table", "scan", "ml.training", "--checksum", "--data-dir", dir)
	if !strings.Contains(sum, "rows 800\nchecksum ") {
		t.Errorf("scan --checksum: %s", sum)
	}
	if again := runCLI(t, "table", "scan", "ml.training", "--checksum", "--data-dir", dir); again != sum {
		t.Errorf("checksum not stable: %s vs %s", sum, again)
	}
	rows := runCLI(t, "table", "scan", "features.ad_daily", "--limit", "3", "--data-dir", dir)
	if lines := strings.Split(strings.TrimSpace(rows), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "ad_id") {
		t.Errorf("scan: %q", rows)
	}

	var snaps []struct {
		ID      string `json:"snapshot_id"`
		Current bool   `json:"current"`
	}
	if err := json.Unmarshal([]byte(runCLI(t, "table", "snapshots", "ml.training", "--json", "--data-dir", dir)), &snaps); err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 1 || !snaps[0].Current || snaps[0].ID == "" {
		t.Fatalf("snapshots %+v", snaps)
	}
	if out := runCLI(t, "table", "snapshots", "ml.training", "--data-dir", dir); !strings.Contains(out, "* ") || !strings.Contains(out, snaps[0].ID) {
		t.Errorf("snapshots: %s", out)
	}
	if out := runCLI(t, "table", "rollback", "ml.training", "--to", snaps[0].ID, "--data-dir", dir); !strings.Contains(out, "already at snapshot") {
		t.Errorf("rollback: %s", out)
	}
}
