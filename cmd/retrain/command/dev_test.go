package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPipelineNames: the dev banner names what the worker can run: the
// built-in examples (suggesting hello), or a --pipelines folder's own.
func TestPipelineNames(t *testing.T) {
	list, first := pipelineNames("")
	if first != "hello" || !strings.Contains(list, "ctr-retrain") || !strings.Contains(list, "built-in examples") {
		t.Errorf("examples: %q, suggests %q", list, first)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: sched-a\nnodes:\n  - {id: n, type: noop}\n"), 0o644)
	list, first = pipelineNames(dir)
	if first != "sched-a" || !strings.Contains(list, "sched-a ("+dir+")") || strings.Contains(list, "hello") {
		t.Errorf("folder: %q, suggests %q", list, first)
	}
	list, first = pipelineNames(t.TempDir())
	if first != "NAME" || !strings.Contains(list, "none found") {
		t.Errorf("empty folder: %q, suggests %q", list, first)
	}
}
