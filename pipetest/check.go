package pipetest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// Suite is a test file with the pipeline it tests, checked against it.
type Suite struct {
	File     *File
	Spec     *dags.Spec
	SpecFile string
	Dir      string // the pipeline's folder: the test's pipeline library
	types    *dags.Registry
	outputs  map[string]map[string]nodetype.OutputType // node type -> its outputs' types
}

// runnable are the node types a case may run for real (run: true): they
// need nothing a test has none of (a lake, an object store, GPUs).
var runnable = map[string]bool{"command": true, "noop": true, "gate": true}

// Load reads a test file, finds its pipeline (PIPELINE.yaml beside
// PIPELINE.test.yaml, or the file of the pipeline it names in its
// folder), validates the pipeline against the runner's node types and
// checks every case against it: nodes, instances, params and outputs that
// exist, stubs that fit their node's type (names and types of outputs).
// Errors carry file:line.
func (r *Runner) Load(path string) (*Suite, error) {
	reg := r.reg
	f, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	specFile, data, err := findPipeline(f, dir)
	if err != nil {
		return nil, err
	}
	spec, err := dags.Parse(specFile, data)
	if err != nil {
		return nil, err
	}
	if err := spec.Validate(reg); err != nil {
		return nil, err
	}
	if f.Pipeline != "" && spec.Name != f.Pipeline {
		return nil, &dags.Error{File: f.Path, Line: f.PipelinePos.Line, Col: f.PipelinePos.Col,
			Msg: fmt.Sprintf("pipeline %q: %s defines pipeline %q", f.Pipeline, specFile, spec.Name)}
	}
	s := &Suite{File: f, Spec: spec, SpecFile: specFile, Dir: dir, types: reg, outputs: map[string]map[string]nodetype.OutputType{}}
	for _, t := range r.types {
		s.outputs[t.NodeType.Name] = t.OutputTypes
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// findPipeline returns the pipeline a test file tests: the one it names,
// from its folder's library, else the file beside it of the same name.
func findPipeline(f *File, dir string) (string, []byte, error) {
	if f.Pipeline != "" {
		file, data, err := dags.NewLibrary(os.DirFS(dir)).Find(f.Pipeline)
		if err != nil {
			return "", nil, &dags.Error{File: f.Path, Line: f.PipelinePos.Line, Col: f.PipelinePos.Col, Msg: err.Error()}
		}
		return filepath.Join(dir, file), data, nil
	}
	base := filepath.Base(f.Path)
	stem := strings.TrimSuffix(strings.TrimSuffix(base, ".test.yaml"), ".test.yml")
	var tried []string
	for _, ext := range []string{".yaml", ".yml"} {
		p := filepath.Join(dir, stem+ext)
		data, err := os.ReadFile(p)
		if err == nil {
			return p, data, nil
		}
		tried = append(tried, p)
	}
	return "", nil, &dags.Error{File: f.Path, Msg: fmt.Sprintf("no pipeline to test: %s not found; put the test file beside its pipeline or name it with pipeline: NAME", strings.Join(tried, " or "))}
}

func (s *Suite) errAt(p dags.Pos, format string, args ...any) *dags.Error {
	return &dags.Error{File: s.File.Path, Line: p.Line, Col: p.Col, Msg: fmt.Sprintf(format, args...)}
}

var instanceRe = regexp.MustCompile(`^(.+)\[(\d+)\]$`)

// node returns the spec node an id names: a node, an instance ID[N] of a
// foreach node, or an on_failure node.
func (s *Suite) node(id string) (*dags.Node, bool) {
	base, inst := id, false
	if m := instanceRe.FindStringSubmatch(id); m != nil {
		base, inst = m[1], true
	}
	for _, list := range [][]*dags.Node{s.Spec.Nodes, s.Spec.OnFailure} {
		for _, n := range list {
			if n.ID == base {
				if inst && n.Foreach == nil {
					return nil, false
				}
				return n, true
			}
		}
	}
	return nil, false
}

func (s *Suite) nodeIDs() []string {
	var ids []string
	for _, list := range [][]*dags.Node{s.Spec.Nodes, s.Spec.OnFailure} {
		for _, n := range list {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

func (s *Suite) unknownNode(p dags.Pos, what, id string) *dags.Error {
	if m := instanceRe.FindStringSubmatch(id); m != nil {
		if n, ok := s.node(m[1]); !ok || n.Foreach == nil {
			return s.errAt(p, "%s %s: %s is not a foreach node of pipeline %s, so it has no instances", what, id, m[1], s.Spec.Name)
		}
	}
	return s.errAt(p, "%s %s: pipeline %s has no node %s%s", what, id, s.Spec.Name, id, didYouMean(id, s.nodeIDs()))
}

func (s *Suite) check() error {
	var errs dags.ErrorList
	add := func(e *dags.Error) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	params := map[string]bool{}
	var paramNames []string
	for _, p := range s.Spec.Params {
		params[p.Name] = true
		paramNames = append(paramNames, p.Name)
	}
	for _, c := range s.File.Cases {
		for _, k := range slices.Sorted(maps.Keys(c.Params)) {
			if !params[k] {
				add(s.errAt(c.ParamPos[k], "case %q: params.%s: pipeline %s has no param %s%s", c.Name, k, s.Spec.Name, k, didYouMean(k, paramNames)))
			}
		}
		if c.Schedule != "" && !slices.ContainsFunc(s.Spec.Schedules, func(sc *dags.Schedule) bool { return sc.ID == c.Schedule }) {
			add(s.errAt(c.Pos, "case %q: schedule %s: pipeline %s has no such schedule", c.Name, c.Schedule, s.Spec.Name))
		}
		for _, st := range c.Stubs {
			for _, e := range s.checkStub(c, st) {
				add(e)
			}
		}
		for _, x := range c.Expect.Nodes {
			for _, e := range s.checkExpect(c, x) {
				add(e)
			}
		}
		if c.Expect.Status != "" && !slices.Contains([]string{string(runs.StatusSucceeded), string(runs.StatusFailed), string(runs.StatusCancelled)}, c.Expect.Status) {
			add(s.errAt(c.Expect.Pos, "case %q: expect.status %q: want succeeded, failed or cancelled", c.Name, c.Expect.Status))
		}
	}
	return errs.Err()
}

func (s *Suite) checkStub(c *Case, st *Stub) []*dags.Error {
	n, ok := s.node(st.Node)
	if !ok {
		return []*dags.Error{s.unknownNode(st.Pos, fmt.Sprintf("case %q: stub for node", c.Name), st.Node)}
	}
	what := fmt.Sprintf("case %q: stub %s (type %s)", c.Name, st.Node, n.Type)
	var errs []*dags.Error
	switch {
	case st.Run && !runnable[n.Type]:
		errs = append(errs, s.errAt(st.Pos, "%s: run: true runs only %s nodes, which need nothing external; stub this node's outputs or error",
			what, strings.Join(slices.Sorted(maps.Keys(runnable)), ", ")))
	case st.Canary != nil && n.Type != "canary":
		errs = append(errs, s.errAt(st.Canary.Pos, "%s: a canary stub is for canary nodes", what))
	case n.Type == "canary" && st.Canary == nil && len(st.Attempts) == 0:
		errs = append(errs, s.errAt(st.Pos, "%s: a canary node takes a canary stub (its checks' values per step) or outputs/error", what))
	}
	for _, d := range []*Decision{st.Approve, st.Reject} {
		if d == nil {
			continue
		}
		switch {
		case n.Type == "gate" && st.Reject != nil:
			errs = append(errs, s.errAt(d.Pos, "%s: a gate takes approve, not reject (a gate that waits rejects when nobody approves)", what))
		case n.Type == "gate" && d.Step != 0:
			errs = append(errs, s.errAt(d.Pos, "%s: a gate has no steps: approve after a time into its wait", what))
		case n.Type == "canary" && d.Step == 0:
			errs = append(errs, s.errAt(d.Pos, "%s: say at which step (step: N, from 1) the canary is decided", what))
		case n.Type != "gate" && n.Type != "canary":
			errs = append(errs, s.errAt(d.Pos, "%s: only gate and canary nodes are approved or rejected", what))
		}
	}
	for _, a := range st.Attempts {
		if a.Outputs != nil {
			errs = append(errs, s.checkOutputs(what, n, a.Outputs, a.OutputsPos, a.Pos, true)...)
		}
	}
	return errs
}

// outputNames are the output keys a node can have, and whether others
// may come (a command that declares none).
func (s *Suite) outputNames(n *dags.Node, stub bool) ([]string, bool) {
	t, _ := s.types.Lookup(n.Type)
	names := slices.Clone(t.Outputs)
	if n.Foreach != nil && !stub {
		// The node's own outputs are its instances'; a stub answers an
		// instance, as the type's outputs. Expectations may read these.
		names = append(names, dags.ForeachItems, dags.ForeachCount)
	}
	switch {
	case len(t.Outputs) == 0 && !t.OpenOutputs:
		return nil, true // dynamic outputs: any key
	case t.OpenOutputs && n.Outputs == nil:
		return names, true
	}
	names = append(names, slices.Sorted(maps.Keys(n.Outputs))...)
	return names, false
}

// checkOutputs checks a stub's (stub: true) or an expectation's outputs
// against the node's: names its type and declaration give, and for
// declared outputs their types (a stub must give every declared one, as
// the run would refuse it).
func (s *Suite) checkOutputs(what string, n *dags.Node, out map[string]any, at map[string]dags.Pos, p dags.Pos, stub bool) []*dags.Error {
	var errs []*dags.Error
	names, open := s.outputNames(n, stub)
	for _, k := range slices.Sorted(maps.Keys(out)) {
		if !open && !slices.Contains(names, k) {
			errs = append(errs, s.errAt(at[k], "%s: output %s: node %s has no output %s%s; its outputs are %s",
				what, k, n.ID, k, didYouMean(k, names), strings.Join(names, ", ")))
		}
	}
	typed := s.outputs[n.Type]
	for _, k := range slices.Sorted(maps.Keys(out)) {
		t, ok := typed[k]
		if _, decl := n.Outputs[k]; decl || !ok || t.Type == dags.ParamAny || (out[k] == nil && t.Nullable) {
			continue
		}
		if err := dags.CheckOutputs(map[string]dags.ParamType{k: t.Type}, map[string]any{k: out[k]}); err != nil {
			errs = append(errs, s.errAt(at[k], "%s: %v (type %s's output)", what, err, n.Type))
		}
	}
	if len(n.Outputs) > 0 {
		declared := n.Outputs
		if !stub { // an expectation names some outputs: check those
			declared = map[string]dags.ParamType{}
			for k, t := range n.Outputs {
				if _, ok := out[k]; ok {
					declared[k] = t
				}
			}
		}
		if err := dags.CheckOutputs(declared, out); err != nil {
			errs = append(errs, s.errAt(p, "%s: outputs do not match node %s's declared outputs: %v", what, n.ID, err))
		}
	}
	return errs
}

var statuses = []string{string(runs.NodeSucceeded), string(runs.NodeFailed), string(runs.NodeSkipped), string(runs.NodeCancelled), string(runs.NodePending)}

func (s *Suite) checkExpect(c *Case, x *NodeExpect) []*dags.Error {
	n, ok := s.node(x.ID)
	if !ok {
		return []*dags.Error{s.unknownNode(x.Pos, fmt.Sprintf("case %q: expect.nodes", c.Name), x.ID)}
	}
	what := fmt.Sprintf("case %q: expect.nodes.%s", c.Name, x.ID)
	var errs []*dags.Error
	if x.Status != "" && !slices.Contains(statuses, x.Status) {
		errs = append(errs, s.errAt(x.Pos, "%s: status %q: want one of %s", what, x.Status, strings.Join(statuses, ", ")))
	}
	if x.Instances != nil && n.Foreach == nil {
		errs = append(errs, s.errAt(x.Pos, "%s: instances: %s is not a foreach node", what, n.ID))
	}
	if x.HasTraffic && n.Type != "canary" {
		errs = append(errs, s.errAt(x.Pos, "%s: traffic: %s is not a canary node", what, n.ID))
	}
	if x.Outputs != nil {
		errs = append(errs, s.checkOutputs(what, n, x.Outputs, x.OutputsPos, x.Pos, false)...)
	}
	return errs
}

// instanceIndex returns N of an instance id ID[N], or -1.
func instanceIndex(id string) int {
	if m := instanceRe.FindStringSubmatch(id); m != nil {
		i, _ := strconv.Atoi(m[2])
		return i
	}
	return -1
}
