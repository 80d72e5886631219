// Package layers holds the test that keeps the module's imports pointing
// down: cmd -> worker -> workflows -> node types (activities/...) -> the node
// core (nodetype) and the run contract (runs) -> domain packages. A
// newcomer finds where a change belongs from the folders; an upward import
// would make that map lie.
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
	case pkg == "cmd" || strings.HasPrefix(pkg, "cmd/"), strings.HasPrefix(pkg, "examples/"), pkg == "integration", pkg == "internal/devkit/bench":
		return 7
	case pkg == "internal/cli", pkg == "pipetest": // pipetest runs pipelines on the worker's node types, in Temporal's test environment
		return 6
	case pkg == "worker", pkg == "internal/devkit/devstack" || strings.HasPrefix(pkg, "internal/devkit/devstack/"):
		return 5
	case pkg == "workflows", pkg == "internal/report":
		return 4
	case strings.HasPrefix(pkg, "activities/"), pkg == "internal/tracing": // tracing reads runs' and nodetype's inputs
		return 3
	case pkg == "nodetype", pkg == "runs", pkg == "schedules":
		return 2
	}
	return 1
}

// The pipeline workflow interprets plans; it must not link the lake, the
// trainers or any node type's code, so a worker's workflow side stays small
// and replays never depend on a step's implementation.
var workflowsMustNotLink = []string{
	module + "internal/features", module + "internal/lake", module + "activities/",
	"github.com/apache/iceberg-go", "github.com/parquet-go/parquet-go",
}

type listed struct {
	ImportPath string
	Imports    []string
}

func list(t *testing.T, pattern string) []listed {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", pattern).Output()
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
	var upward []string
	for _, p := range list(t, module+"...") {
		from := strings.TrimPrefix(p.ImportPath, module)
		for _, imp := range p.Imports {
			to, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if level(to) > level(from) {
				upward = append(upward, fmt.Sprintf("%s -> %s", from, to))
			}
		}
	}
	slices.Sort(upward)
	for _, u := range upward {
		t.Errorf("upward import: %s (imports point down: cmd -> worker -> workflows -> activities -> nodetype, runs -> domain packages)", u)
	}
}

// TestWorkflowsStayLight: not even indirectly does the workflows package
// link the lake, a trainer or a node type.
func TestWorkflowsStayLight(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"workflows").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range workflowsMustNotLink {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("workflows links %s", dep)
			}
		}
	}
}

// TestLevels pins a few packages' places, so a renamed folder cannot
// silently fall to the domain level and make the check above vacuous.
func TestLevels(t *testing.T) {
	for pkg, want := range map[string]int{
		"cmd/retrain": 7, "internal/cli": 6, "worker": 5, "workflows": 4, "internal/report": 4,
		"activities/train": 3, "activities/internal/objects": 3, "internal/devkit/devstack": 5, "internal/devkit/bench": 7, "nodetype": 2, "runs": 2, "schedules": 2, "dags": 1, "internal/lake": 1,
	} {
		if got := level(pkg); got != want {
			t.Errorf("level(%s) = %d, want %d", pkg, got, want)
		}
	}
	names := map[string]bool{}
	for _, p := range list(t, module+"...") {
		names[strings.TrimPrefix(p.ImportPath, module)] = true
	}
	for _, pkg := range []string{"cmd/retrain", "internal/cli", "worker", "workflows", "internal/report", "activities/train", "nodetype", "runs", "internal/devkit/devstack", "internal/devkit/bench"} {
		if !names[pkg] {
			t.Errorf("package %s is gone: update level()", pkg)
		}
	}
}

// tooling is internal/devkit: the development stack, test servers, fault
// proxies, demo data and benchmark helpers. What ships in a worker never
// links it; only commands, the CLI, tests and benchmarks do (and the
// node-test helpers, which only tests import).
const tooling = "internal/devkit/"

func mayUseTooling(pkg string) bool {
	for _, p := range []string{"cmd/", "examples/", "benchmarks/", tooling} {
		if strings.HasPrefix(pkg, p) {
			return true
		}
	}
	return pkg == "integration" || pkg == "internal/cli" || pkg == "activities/internal/nodetest"
}

// TestToolingStaysOut: no product package imports the tooling under
// internal/devkit, so the folder names say truly which code ships.
func TestToolingStaysOut(t *testing.T) {
	var bad []string
	for _, p := range list(t, module+"...") {
		from := strings.TrimPrefix(p.ImportPath, module)
		if mayUseTooling(from) {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+tooling) {
				bad = append(bad, from+" -> "+strings.TrimPrefix(imp, module))
			}
		}
	}
	for _, b := range bad {
		t.Errorf("product code imports tooling: %s (move it out of %s or the code into it)", b, tooling)
	}
	if mayUseTooling("worker") || mayUseTooling("activities/train") || mayUseTooling("internal/lake") {
		t.Error("mayUseTooling lets product packages through")
	}
}
