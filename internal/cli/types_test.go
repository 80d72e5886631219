package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/worker"
)

// TestNodeTypesDocUpToDate: docs/node-types.md is what `retrain dag types
// --markdown` prints, so the reference follows the node types' structs.
func TestNodeTypesDocUpToDate(t *testing.T) {
	var buf bytes.Buffer
	reg := worker.Types()
	var names []string
	names = append(names, reg.Names()...)
	app := &App{Out: &buf, Err: &buf}
	cmd := newTypesCommand(app)
	cmd.SetArgs(append([]string{"--markdown"}, names...))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../docs/node-types.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatal("docs/node-types.md is stale: run `go run ./cmd/retrain dag types --markdown > docs/node-types.md`")
	}
}

// TestEveryFieldDocumented: a built-in type's fields and outputs are all
// declared, so the reference has no holes.
func TestEveryFieldDocumented(t *testing.T) {
	reg := worker.Types()
	for _, name := range reg.Names() {
		typ, _ := reg.Lookup(name)
		if typ.Doc == "" {
			t.Errorf("%s: no doc", name)
		}
		for _, f := range typ.Fields {
			if strings.TrimSpace(f.Doc) == "" {
				t.Errorf("%s.%s: no doc", name, f.Name)
			}
		}
		if len(typ.Outputs) == 0 && !typ.OpenWith {
			t.Errorf("%s: declares no outputs", name)
		}
	}
}
