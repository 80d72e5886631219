// Package layers holds the test that keeps the module's imports pointing
// down: cmd -> worker -> workflows -> node steps (activities) -> domain
// packages. A newcomer finds where a change belongs from the folders; an
// upward import would make that map lie.
package layers

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/retrain-ml/retrain/"

// level is a package's place in the stack; a package may import packages
// of its own level or below. Packages not listed are domain packages (1).
func level(pkg string) int {
	switch {
	case pkg == "cmd" || strings.HasPrefix(pkg, "cmd/"), strings.HasPrefix(pkg, "examples/"), pkg == "integration", pkg == "internal/bench":
		return 6
	case pkg == "internal/cli":
		return 5
	case pkg == "worker", pkg == "internal/devstack" || strings.HasPrefix(pkg, "internal/devstack/"), pkg == "runs":
		return 4
	case pkg == "workflows":
		return 3
	case pkg == "activities", pkg == "nodetype":
		return 2
	}
	return 1
}

// knownUpward are the upward imports that exist today, each to be removed
// by the node-type restructure (issue 9): report reads node artifact types
// and run results from the packages that run them, and workflows takes the
// promotion's plan types from features. The test fails on any other upward
// import, and also when one of these goes away, so the list stays true.
var knownUpward = []string{
	"internal/report -> activities",
	"internal/report -> workflows",
}

// knownHeavy are the workflows package's imports of the lake, to go with
// the same restructure: workflows should not link Iceberg.
var knownHeavy = []string{
	"workflows -> internal/features",
}

type listed struct {
	ImportPath string
	Imports    []string
}

func list(t *testing.T) []listed {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; is the test running inside the module?", len(pkgs))
	}
	return pkgs
}

func TestImportsPointDown(t *testing.T) {
	var upward, heavy []string
	for _, p := range list(t) {
		from := strings.TrimPrefix(p.ImportPath, module)
		for _, imp := range p.Imports {
			to, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if (to == "internal/cli" || to == "cmd" || strings.HasPrefix(to, "cmd/")) && level(from) < 6 {
				upward = append(upward, fmt.Sprintf("%s -> %s", from, to))
				continue
			}
			if level(to) > level(from) {
				upward = append(upward, fmt.Sprintf("%s -> %s", from, to))
			}
			if from == "workflows" && (to == "internal/features" || to == "internal/lake") {
				heavy = append(heavy, fmt.Sprintf("%s -> %s", from, to))
			}
		}
	}
	check := func(what string, got, known []string) {
		slices.Sort(got)
		for _, g := range got {
			if !slices.Contains(known, g) {
				t.Errorf("%s: %s (imports point down: cmd -> worker -> workflows -> activities -> domain packages)", what, g)
			}
		}
		for _, k := range known {
			if !slices.Contains(got, k) {
				t.Errorf("%s %q is gone: remove it from the known list", what, k)
			}
		}
	}
	check("upward import", upward, knownUpward)
	check("workflows links the lake", heavy, knownHeavy)
}
