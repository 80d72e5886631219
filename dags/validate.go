package dags

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Validate checks what Parse cannot see alone: the graph (ids, needs,
// cycles), node types and their `with` fields against reg, expressions and
// the references in them, and the on_failure rules. Every problem found is
// reported, as an ErrorList. A nil reg skips the checks that need node
// types, for tools that only look at the graph.
func (s *Spec) Validate(reg *Registry) error {
	return s.validateFor(reg, nil)
}

// validateFor validates s for a run that gives the params in given: the
// checks that resolve params at their defaults leave those out (Compile
// checks them again with the run's values), so a default the run replaces
// cannot refuse the run.
func (s *Spec) validateFor(reg *Registry, given map[string]any) error {
	v := &validator{errs: errs{file: s.File}, s: s, reg: reg, seen: map[string]bool{}, outs: s.declaredOutputs(), given: given}
	v.validate()
	return v.list.Err()
}

type validator struct {
	errs
	s     *Spec
	reg   *Registry
	nodes map[string]*Node                // nodes by id (first of duplicates)
	comps map[string]*Node                // on_failure nodes by id
	index map[*Node]int                   // place in its list, for stable reports
	seen  map[string]bool                 // reference errors already reported
	outs  map[string]map[string]ParamType // declared outputs by node id
	given map[string]any                  // params a run gives (validateFor)
}

// defaults are the params whose defaults are known and that the run (if
// any) does not give: what validation resolves references with.
func (v *validator) defaults() map[string]any {
	d := v.s.knownDefaults()
	for k := range v.given {
		delete(d, k)
	}
	return d
}

func (v *validator) validate() {
	s := v.s
	if s.Name == "" {
		v.at(s.Pos, "missing required field \"name\"")
	} else if !nameRe.MatchString(s.Name) {
		v.at(s.Pos, "invalid name %q: use lowercase letters, digits, '_' and '-', starting with a letter or digit", s.Name)
	}
	if len(s.Nodes) == 0 {
		v.at(s.Pos, "nodes must not be empty")
	}
	if s.Parallelism < 0 {
		v.at(s.Pos, "parallelism must be at least 1, got %d", s.Parallelism)
	}
	// A param's default is bound at every run: one whose ${...} does not
	// parse, or refers to anything but run values, fails every run, so it
	// fails validation (as BindParams would).
	for _, p := range s.Params {
		if p.HasDefault {
			if err := checkParamRefs(p.Name, p.Default); err != nil {
				v.at(p.Pos, "%v", err)
			}
		}
	}
	v.validateWaits(s) // waitfor.go
	for _, n := range s.OnFailure {
		if len(n.WaitFor) > 0 {
			v.at(n.WaitFor[0].Pos, "on_failure node %s: wait_for applies to nodes only; compensation runs at once", n.ID)
		}
	}
	v.ids()
	for _, n := range s.Nodes {
		v.needs(n, false)
	}
	for _, n := range s.OnFailure {
		v.needs(n, true)
		v.compensates(n)
	}
	v.cycles(s.Nodes, v.nodes)
	v.cycles(s.OnFailure, v.comps)
	for _, n := range s.Nodes {
		v.node(n, false)
	}
	for _, n := range s.OnFailure {
		v.node(n, true)
	}
	v.retries()
	v.schedules() // schedule.go
	for _, n := range s.Nodes {
		v.foreach(n) // foreach.go
	}
}

// nodeName names a node in messages.
func nodeName(n *Node, onFailure bool) string {
	if onFailure {
		return fmt.Sprintf("on_failure node %q", n.ID)
	}
	return fmt.Sprintf("node %q", n.ID)
}

func (v *validator) node(n *Node, onFailure bool) {
	if v.reg != nil && n.Type != "" {
		v.with(n, onFailure)
		v.cache(n, onFailure) // cache.go
	}
	up := v.upstream(n, onFailure)
	for _, k := range slices.Sorted(maps.Keys(n.With)) {
		pos := n.WithKeyPos[k]
		if pos == (Pos{}) {
			pos = n.Pos
		}
		refs, err := Refs(n.With[k])
		if err != nil {
			v.at(pos, "%s: with field %q: %v", nodeName(n, onFailure), k, err)
			continue
		}
		for _, r := range refs {
			v.ref(n, onFailure, r, pos, up)
		}
	}
	if n.When != "" {
		pos := n.WhenPos
		if pos == (Pos{}) {
			pos = n.Pos
		}
		w, err := ParseWhen(n.When)
		if err != nil {
			v.at(pos, "%s: when: %v", nodeName(n, onFailure), err)
			return
		}
		for _, r := range w.Refs() {
			v.ref(n, onFailure, r, pos, up)
		}
	}
}

// ref checks that a reference names a declared param, or an output of a
// node that has completed by the time n runs.
func (v *validator) ref(n *Node, onFailure bool, r Ref, pos Pos, up *upstreamSet) {
	w := nodeName(n, onFailure)
	key := fmt.Sprint(w, r, pos)
	if v.seen[key] {
		return
	}
	v.seen[key] = true
	if r.Kind == "item" {
		v.itemRef(n, onFailure, r, pos) // foreach.go
		return
	}
	if r.Kind == "run" {
		v.runRef(n, onFailure, r, pos) // runvalues.go
		return
	}
	if r.Kind == "params" {
		if v.s.Param(r.Name) == nil {
			names := make([]string, len(v.s.Params))
			for i, p := range v.s.Params {
				names[i] = p.Name
			}
			v.at(pos, "%s references params.%s, which is not declared%s", w, r.Name, didYouMean(r.Name, names))
		}
		return
	}
	target := v.s.Node(r.Name)
	switch {
	case r.Name == n.ID:
		v.at(pos, "%s references its own outputs (nodes.%s); use outputs of nodes it needs", w, r.Name)
		return
	case target == nil:
		v.at(pos, "%s references nodes.%s, which is not a node%s", w, r.Name, didYouMean(r.Name, append(ids(v.s.Nodes), ids(v.s.OnFailure)...)))
		return
	case !onFailure && v.nodes[r.Name] == nil:
		v.at(pos, "%s references nodes.%s, which is an on_failure node; only on_failure nodes can use their outputs", w, r.Name)
		return
	case onFailure && !up.has(r.Name):
		v.at(pos, "%s references nodes.%s, which is neither the node it compensates (%q) nor upstream of it", w, r.Name, n.Compensates)
		return
	case !up.has(r.Name):
		// Once per node and target, and not at all when one of the node's
		// needs is not a node: a typo there (prepp for prep) is the one
		// mistake, and "add it to needs" would be the wrong fix.
		if once := fmt.Sprint(w, " -> ", r.Name); !v.seen[once] && !v.unknownNeed(n, onFailure) {
			v.seen[once] = true
			v.at(pos, "%s references nodes.%s, which is not upstream of it; add it to needs", w, r.Name)
		}
		return
	}
	if target.Foreach != nil {
		v.foreachOutput(w, target, r, pos) // foreach.go
		return
	}
	if v.reg == nil {
		return
	}
	t, ok := v.reg.Lookup(target.Type)
	switch {
	case !ok || slices.Contains(t.Outputs, r.Key):
	case t.OpenOutputs && target.Outputs != nil:
		// The spec declared the node's outputs: only those, and the ones
		// its type always gives, can be referred to.
		if _, ok := target.Outputs[r.Key]; ok {
			return
		}
		outs := slices.Sorted(slices.Values(append(slices.Collect(maps.Keys(target.Outputs)), t.Outputs...)))
		v.at(pos, "%s references nodes.%s.outputs.%s, but node %s declares no output %q%s; its outputs are %s",
			w, r.Name, r.Key, r.Name, r.Key, didYouMean(r.Key, outs), strings.Join(outs, ", "))
	case t.OpenOutputs:
		// Any key: what the node outputs is only known at run time.
	case len(t.Outputs) > 0:
		outs := slices.Sorted(slices.Values(t.Outputs))
		v.at(pos, "%s references nodes.%s.outputs.%s, but type %s has no output %q%s; its outputs are %s",
			w, r.Name, r.Key, target.Type, r.Key, didYouMean(r.Key, outs), strings.Join(outs, ", "))
	}
}

// outputs checks a node's declared outputs against its type: only a type
// with open outputs takes a declaration, and a declared key must not be
// one the type always outputs (the node could not output it a second time).
func (v *validator) outputs(n *Node, t NodeType, w string) {
	if n.Outputs == nil {
		return
	}
	pos := n.OutputsPos
	if pos == (Pos{}) {
		pos = n.Pos
	}
	if !t.OpenOutputs {
		why := "are not open"
		if len(t.Outputs) > 0 {
			why = "are fixed: " + strings.Join(t.Outputs, ", ")
		}
		v.at(pos, "%s: outputs can only be declared for a node type whose outputs are open (such as command); type %s's outputs %s", w, n.Type, why)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(n.Outputs)) {
		if slices.Contains(t.Outputs, k) {
			kpos := n.OutputKeyPos[k]
			if kpos == (Pos{}) {
				kpos = pos
			}
			v.at(kpos, "%s: outputs: %s is an output type %s always gives; declare only the ones the node adds", w, k, n.Type)
		}
	}
}

// retries checks each merged retry policy, which no single block can: a
// node's max_interval may be below the initial_interval it inherits.
func (v *validator) retries() {
	s := v.s
	def := s.Defaults.Retry.over(DefaultRetry())
	if !s.Defaults.Retry.IsZero() && def.MaxInterval < def.InitialInterval {
		v.at(s.Defaults.Retry.Pos, "defaults.retry: max_interval %s is less than initial_interval %s",
			formatDuration(def.MaxInterval), formatDuration(def.InitialInterval))
	}
	for _, group := range []struct {
		list      []*Node
		onFailure bool
	}{{s.Nodes, false}, {s.OnFailure, true}} {
		for _, n := range group.list {
			r := n.Retry
			if r.InitialInterval == nil && r.MaxInterval == nil {
				continue
			}
			if p := r.over(def); p.MaxInterval < p.InitialInterval {
				v.at(r.Pos, "%s retry: max_interval %s is less than initial_interval %s",
					nodeName(n, group.onFailure), formatDuration(p.MaxInterval), formatDuration(p.InitialInterval))
			}
		}
	}
}
