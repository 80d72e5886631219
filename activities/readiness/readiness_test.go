package readiness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
)

func badInput(t *testing.T, err error, want string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
	if !errorsAs(err, &appErr) || appErr.Type() != errtype.BadInput || !appErr.NonRetryable() {
		t.Fatalf("error %v is not a permanent BadInput", err)
	}
}

func TestFilesLocal(t *testing.T) {
	root := t.TempDir()
	day := filepath.Join(root, "2026-11-27")
	c := &Checker{Env: progenv.Policy{AllowPaths: []string{root}}}
	in := Input{LogicalDate: "2026-11-27", Condition: dags.Wait{Files: day + "/*.csv", Marker: "_SUCCESS"}}
	obs, err := c.Check(context.Background(), in)
	if err != nil || obs.Ready || !strings.Contains(obs.Saw, "no files match") {
		t.Fatalf("before: %+v, %v", obs, err)
	}
	if err := os.MkdirAll(day, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(day, "a.csv"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	obs, err = c.Check(context.Background(), in)
	if err != nil || obs.Ready || !strings.Contains(obs.Saw, "has no _SUCCESS") {
		t.Fatalf("without marker: %+v, %v", obs, err)
	}
	if err := os.WriteFile(filepath.Join(day, "_SUCCESS"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	obs, err = c.Check(context.Background(), in)
	if err != nil || !obs.Ready {
		t.Fatalf("with marker: %+v, %v", obs, err)
	}
	// A glob outside the allowed folders fails at once, not at the deadline.
	_, err = c.Check(context.Background(), Input{LogicalDate: "2026-11-27", Condition: dags.Wait{Files: "/etc/*.conf"}})
	badInput(t, err, "outside the folders this worker allows")
}

func TestCommand(t *testing.T) {
	c := &Checker{}
	in := Input{LogicalDate: "2026-11-27", Condition: dags.Wait{Command: []string{"sh", "-c", "echo feed at 10 of 24 hours; exit 3"}}}
	obs, err := c.Check(context.Background(), in)
	if err != nil || obs.Ready || obs.Saw != "sh exited 3: feed at 10 of 24 hours" {
		t.Fatalf("exit 3: %+v, %v", obs, err)
	}
	in.Condition.Command = []string{"true"}
	if obs, err := c.Check(context.Background(), in); err != nil || !obs.Ready {
		t.Fatalf("true: %+v, %v", obs, err)
	}
	c.AllowCommands = []string{"python3"}
	_, err = c.Check(context.Background(), in)
	badInput(t, err, "true")
	c.AllowCommands = nil
	in.Condition.Command = []string{"/no/such/program"}
	_, err = c.Check(context.Background(), in)
	badInput(t, err, "/no/such/program")
}

func TestTableWithoutLake(t *testing.T) {
	_, err := (&Checker{}).Check(context.Background(), Input{LogicalDate: "2026-11-27", Condition: dags.Wait{Table: "a.b", DateColumn: "date"}})
	badInput(t, err, "this worker has no lake")
	_, err = (&Checker{}).Check(context.Background(), Input{Condition: dags.Wait{Table: "a.b"}})
	badInput(t, err, "no logical date")
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
