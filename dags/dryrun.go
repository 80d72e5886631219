package dags

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A dry run says what a run of a plan would do as far as the params and
// the run values decide it, without running anything: which nodes run,
// which a `when` skips (and which it cannot decide, because it reads an
// output only the run makes), each with its `with` resolved as the run
// would resolve it. It evaluates with the code the Pipeline workflow uses
// (Interpolate, EvalWhen), so the two cannot disagree about a param; it
// never resolves a ${secret.NAME}, which stays the reference it is, as in
// the run's history.

// What a dry run says of a node.
const (
	DryRun       = "run"        // it runs (its with is resolved as far as the params allow)
	DrySkipped   = "skipped"    // its when is false, or an upstream node's was
	DryUndecided = "undecided"  // its when reads an output only the run makes, or an upstream node's does
	DryFails     = "fails"      // the run would fail here: its when or with cannot be evaluated
	DryOnFailure = "on_failure" // an on_failure node: runs only if the run fails
	// DryNotStarted: an upstream node fails, so the run never gets here.
	DryNotStarted = "not_started"
)

// MaxDryInstances bounds the foreach instances a dry run lists per node
// (it always gives their count): as many as a run's result lists.
const MaxDryInstances = 1000

// DryRunPlan is a dry run of a plan.
type DryRunPlan struct {
	Pipeline     string         `json:"pipeline"`
	Source       string         `json:"source,omitempty"`
	RunID        string         `json:"run_id,omitempty"`
	LogicalTime  string         `json:"logical_time"`
	LogicalDate  string         `json:"logical_date"`
	Params       map[string]any `json:"params"`
	ParamsDigest string         `json:"params_digest"`
	Nodes        []DryNode      `json:"nodes"`
	OnFailure    []DryNode      `json:"on_failure,omitempty"`
}

// DryNode is one node of a dry run.
type DryNode struct {
	ID          string   `json:"id"`
	Type        string   `json:"type"`
	Needs       []string `json:"needs,omitempty"`
	Compensates string   `json:"compensates,omitempty"`
	Decision    string   `json:"decision"`
	Reason      string   `json:"reason,omitempty"`
	When        string   `json:"when,omitempty"`
	// With is the node's `with` resolved: params, run values and foreach
	// items filled in; references to other nodes' outputs (and to the run
	// id, when not given) left as the ${...} they are, listed in Pending;
	// ${secret.NAME} always left as written.
	With    map[string]any `json:"with,omitempty"`
	Pending []string       `json:"pending,omitempty"`
	Foreach *DryForeach    `json:"foreach,omitempty"`
}

// DryForeach is a foreach node's fan-out in a dry run.
type DryForeach struct {
	Expr string `json:"expr"`
	// Count is the number of instances; -1 when the list is an output
	// only the run makes.
	Count     int       `json:"count"`
	Instances []DryNode `json:"instances,omitempty"` // the first MaxDryInstances
	Item      any       `json:"item,omitempty"`      // an instance's item
}

// NewDryRun makes the dry run of plan with run values rv (rv.ID empty:
// ${run.id} is not known and stays a reference). Params that hold run
// values (a schedule's ${date_add(run.logical_date, -1)}) are resolved
// first, as the run resolves them when it starts. With reg, each node
// type's Check also sees the node's `with` as far as this run resolves
// it (a schedule's dates, say, which validation cannot know); a block it
// refuses marks the node as failing. A nil reg skips that.
func NewDryRun(plan *Plan, rv RunValues, reg *Registry) (*DryRunPlan, error) {
	params, changed, err := ResolveRunParams(plan.Params, &rv)
	if err != nil {
		return nil, err
	}
	digest := plan.ParamsDigest
	if changed {
		if digest, err = ParamsDigest(params); err != nil {
			return nil, err
		}
	}
	d := &DryRunPlan{
		Pipeline: plan.Pipeline, Source: plan.Source, RunID: rv.ID,
		LogicalTime: rv.LogicalTime, LogicalDate: rv.LogicalDate, Params: params, ParamsDigest: digest,
	}
	sc := Scope{Params: params, Run: &rv}
	pending := func(r Ref) bool { return r.Kind == "nodes" || (r.Kind == "run" && r.Name == "id" && rv.ID == "") }
	byID := map[string]*DryNode{}
	for _, n := range plan.Nodes { // topological order: needs come first
		dn := dryNode(n, sc, pending, reg)
		if dn.Decision == DryRun || dn.Decision == DryUndecided {
			// A node waits on its needs: one skipped skips it (as the
			// run's skip does), one undecided leaves it undecided.
			for _, need := range n.Needs {
				up := byID[need]
				if up == nil {
					continue
				}
				switch up.Decision {
				case DrySkipped:
					dn.Decision, dn.Reason = DrySkipped, fmt.Sprintf("upstream node %s was skipped", need)
				case DryFails, DryNotStarted:
					dn.Decision, dn.Reason = DryNotStarted, fmt.Sprintf("upstream node %s fails", need)
				case DryUndecided:
					if dn.Decision == DryRun {
						dn.Decision, dn.Reason = DryUndecided, fmt.Sprintf("runs if upstream node %s runs", need)
					}
				}
				if dn.Decision == DrySkipped || dn.Decision == DryNotStarted {
					break
				}
			}
		}
		d.Nodes = append(d.Nodes, dn)
		byID[n.ID] = &d.Nodes[len(d.Nodes)-1]
	}
	for _, n := range plan.OnFailure {
		dn := dryNode(n, sc, pending, reg)
		if dn.Decision != DryFails {
			dn.Decision = DryOnFailure
			dn.Reason = "runs only if the run fails"
			if n.Compensates != "" {
				dn.Reason += fmt.Sprintf(" after node %s completed", n.Compensates)
			}
		}
		d.OnFailure = append(d.OnFailure, dn)
	}
	return d, nil
}

// dryNode decides one node by itself, without its needs.
func dryNode(n PlanNode, sc Scope, pending func(Ref) bool, reg *Registry) DryNode {
	dn := DryNode{ID: n.ID, Type: n.Type, Needs: n.Needs, Compensates: n.Compensates, When: n.When, Decision: DryRun}
	if n.Foreach != nil {
		dryForeach(&dn, n, sc, pending, reg)
		return dn
	}
	decideWhen(&dn, n.When, sc, pending)
	if dn.Decision == DryFails {
		return dn
	}
	dryWith(&dn, n.With, sc, pending)
	checkDry(&dn, n, reg, sc, pending)
	return dn
}

// checkDry runs the node type's Check on the node's `with` as far as sc
// resolves it, written as spec text (what stays pending stays a
// reference, which Check leaves to the run). Validation ran it on the
// block as written; what it refuses now, it refuses because of the
// values this run gives, and the run would fail at the node.
func checkDry(dn *DryNode, n PlanNode, reg *Registry, sc Scope, pending func(Ref) bool) {
	if reg == nil || dn.Decision == DryFails || dn.Decision == DrySkipped || len(n.With) == 0 {
		return
	}
	t, ok := reg.Lookup(n.Type)
	if !ok || t.Check == nil || len(runCheck(t, n.With)) > 0 {
		return
	}
	with, _ := specText(n.With, sc, pending).(map[string]any)
	var msgs []string
	for _, err := range runCheck(t, with) {
		msgs = append(msgs, err.Error())
	}
	if len(msgs) > 0 {
		dn.Decision, dn.Reason = DryFails, "with, as this run resolves it: "+strings.Join(msgs, "; ")
	}
}

// specText resolves the strings of v whose references sc knows, writing
// the result as spec text ("${" as "$${"); the others stay as written.
func specText(v any, sc Scope, pending func(Ref) bool) any {
	switch x := v.(type) {
	case string:
		if !HasRef(x) {
			return x
		}
		refs, err := Refs(x)
		if err != nil {
			return x
		}
		for _, r := range refs {
			if pending(r) {
				return x
			}
		}
		r, err := interpolateString(x, sc, "", nil)
		if err != nil {
			return x
		}
		return escapeText(r)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			out[k] = specText(item, sc, pending)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = specText(item, sc, pending)
		}
		return out
	}
	return v
}

// decideWhen evaluates a node's when, or says why it cannot.
func decideWhen(dn *DryNode, when string, sc Scope, pending func(Ref) bool) {
	if when == "" {
		return
	}
	w, err := ParseWhen(when)
	if err != nil {
		dn.Decision, dn.Reason = DryFails, fmt.Sprintf("when %q: %v", when, err)
		return
	}
	var waits []string
	for _, r := range w.Refs() {
		if pending(r) {
			waits = append(waits, strings.Trim(r.String(), "${}"))
		}
	}
	if len(waits) > 0 {
		dn.Decision, dn.Reason = DryUndecided, fmt.Sprintf("when %q reads %s, known only when the run gets there", when, strings.Join(slices.Compact(waits), ", "))
		return
	}
	ok, err := w.Eval(sc)
	switch {
	case err != nil:
		dn.Decision, dn.Reason = DryFails, fmt.Sprintf("when %q: %v", when, err)
	case !ok:
		dn.Decision, dn.Reason = DrySkipped, fmt.Sprintf("when %q is false", when)
	}
}

// dryWith resolves a node's with into dn.
func dryWith(dn *DryNode, with map[string]any, sc Scope, pending func(Ref) bool) {
	if len(with) == 0 {
		return
	}
	var waits []string
	v, err := partialResolve(with, sc, pending, &waits)
	if err != nil {
		dn.Decision, dn.Reason = DryFails, fmt.Sprintf("with: %v", err)
		return
	}
	dn.With, _ = v.(map[string]any)
	slices.Sort(waits)
	dn.Pending = slices.Compact(waits)
}

// dryForeach expands a foreach node whose list the params give.
func dryForeach(dn *DryNode, n PlanNode, sc Scope, pending func(Ref) bool, reg *Registry) {
	f := &DryForeach{Expr: n.Foreach.Expr, Count: -1}
	dn.Foreach = f
	refs, err := Refs(n.Foreach.Expr)
	if err != nil {
		dn.Decision, dn.Reason = DryFails, fmt.Sprintf("foreach %s: %v", n.Foreach.Expr, err)
		return
	}
	for _, r := range refs {
		if pending(r) {
			dn.Decision, dn.Reason = DryUndecided, fmt.Sprintf("foreach %s reads %s: its instances are known only when the run gets there",
				n.Foreach.Expr, strings.Trim(r.String(), "${}"))
			// Its with as far as it is known, items aside.
			dryWith(dn, n.With, sc, func(r Ref) bool { return pending(r) || r.Kind == "item" })
			dn.Decision = DryUndecided
			return
		}
	}
	v, err := Interpolate(n.Foreach.Expr, sc)
	if err != nil {
		dn.Decision, dn.Reason = DryFails, fmt.Sprintf("foreach %s: %v", n.Foreach.Expr, err)
		return
	}
	items, ok := v.([]any)
	if !ok {
		dn.Decision, dn.Reason = DryFails, fmt.Sprintf("foreach %s gave %s, not a list", n.Foreach.Expr, typeName(v))
		return
	}
	f.Count = len(items)
	for i, item := range items[:min(len(items), MaxDryInstances)] {
		isc := sc
		isc.Item = &Item{Value: item, Index: i}
		in := DryNode{ID: InstanceID(n.ID, i), Type: n.Type, When: n.When, Decision: DryRun}
		decideWhen(&in, n.When, isc, pending)
		if in.Decision != DryFails {
			dryWith(&in, n.With, isc, pending)
		}
		checkDry(&in, n, reg, isc, pending)
		in.Foreach = &DryForeach{Count: -1, Item: item}
		f.Instances = append(f.Instances, in)
	}
	if len(items) == 0 {
		dn.Reason = fmt.Sprintf("foreach %s is empty: no instance runs", n.Foreach.Expr)
	}
}

// partialResolve is Interpolate for a dry run: a string whose references
// are all known resolves as the run would resolve it; in one that holds a
// pending reference (added to waits), the known parts are filled in and
// the pending ones left as written, so it still reads as spec text.
func partialResolve(v any, sc Scope, pending func(Ref) bool, waits *[]string) (any, error) {
	switch x := v.(type) {
	case string:
		return partialString(x, sc, pending, waits)
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			r, err := partialResolve(x[k], sc, pending, waits)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			r, err := partialResolve(item, sc, pending, waits)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

func partialString(s string, sc Scope, pending func(Ref) bool, waits *[]string) (any, error) {
	t, err := parseTemplate(s)
	if err != nil {
		return nil, err
	}
	segWaits := func(seg segment) []string {
		var refs []Ref
		switch {
		case seg.ref != nil:
			refs = []Ref{*seg.ref}
		case seg.expr != nil:
			refs = seg.expr.Refs()
		}
		var out []string
		for _, r := range refs {
			if pending(r) {
				out = append(out, strings.Trim(r.String(), "${}"))
			}
		}
		return out
	}
	var all []string
	for _, seg := range t {
		all = append(all, segWaits(seg)...)
	}
	if len(all) == 0 {
		return Interpolate(s, sc)
	}
	*waits = append(*waits, all...)
	var b strings.Builder
	for _, seg := range t {
		switch {
		case seg.secret != "":
			b.WriteString(seg.lit)
		case seg.ref == nil && seg.expr == nil:
			b.WriteString(strings.ReplaceAll(seg.lit, "${", "$${"))
		case len(segWaits(seg)) > 0:
			b.WriteString(seg.sourceFull())
		default:
			v, err := seg.value(sc)
			if err != nil {
				return nil, err
			}
			text, err := format(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", seg.source(), err)
			}
			b.WriteString(strings.ReplaceAll(text, "${", "$${"))
		}
	}
	return b.String(), nil
}

// sourceFull is the segment as written, not shortened.
func (seg segment) sourceFull() string {
	if seg.expr != nil {
		return "${" + seg.expr.src + "}"
	}
	return seg.ref.String()
}
