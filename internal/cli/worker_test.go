package cli

import (
	"testing"
)

// TestWorkerRootHasWriters: the retrain-worker binary builds its App from
// nothing, and the worker command and its logger write to Out and Err.
func TestWorkerRootHasWriters(t *testing.T) {
	app := &App{}
	cmd := NewWorkerRoot(app, "retrain-worker")
	if app.Out == nil || app.Err == nil {
		t.Fatalf("Out %v, Err %v: the worker would panic on its first log line", app.Out, app.Err)
	}
	if cmd.Use != "retrain-worker" || cmd.PersistentFlags().Lookup("address") == nil {
		t.Fatalf("use %q, --address %v", cmd.Use, cmd.PersistentFlags().Lookup("address"))
	}
	app.Logger().Info("worker test") // must not panic
}
