package dags

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/internal/number"
)

// Validate checks what Parse cannot see alone: the graph (ids, needs,
// cycles), node types and their `with` fields against reg, expressions and
// the references in them, and the on_failure rules. Every problem found is
// reported, as an ErrorList. A nil reg skips the checks that need node
// types, for tools that only look at the graph.
func (s *Spec) Validate(reg *Registry) error {
	v := &validator{errs: errs{file: s.File}, s: s, reg: reg, seen: map[string]bool{}, outs: s.declaredOutputs()}
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

func (v *validator) ids() {
	v.nodes = map[string]*Node{}
	v.comps = map[string]*Node{}
	v.index = map[*Node]int{}
	first := map[string]*Node{}
	for _, group := range []struct {
		list []*Node
		byID map[string]*Node
	}{{v.s.Nodes, v.nodes}, {v.s.OnFailure, v.comps}} {
		for i, n := range group.list {
			v.index[n] = i
			if !idRe.MatchString(n.ID) {
				v.at(n.Pos, "invalid node id %q: use letters, digits, '_' and '-', starting with a letter", n.ID)
				continue
			}
			if n.Type == "" {
				v.at(n.Pos, "node %q: missing required field \"type\"", n.ID)
			}
			if f, dup := first[n.ID]; dup {
				v.at(n.Pos, "duplicate node id %q, also at line %d; ids must be unique across nodes and on_failure", n.ID, f.Pos.Line)
				continue
			}
			first[n.ID] = n
			group.byID[n.ID] = n
		}
	}
}

func needPos(n *Node, i int) Pos {
	if i < len(n.NeedsPos) {
		return n.NeedsPos[i]
	}
	return n.Pos
}

func (v *validator) needs(n *Node, onFailure bool) {
	w := nodeName(n, onFailure)
	listed := map[string]bool{}
	for i, need := range n.Needs {
		pos := needPos(n, i)
		switch {
		case need == n.ID:
			v.at(pos, "%s needs itself", w)
		case listed[need]:
			v.at(pos, "%s lists %q in needs twice", w, need)
		case !onFailure && v.nodes[need] == nil && v.comps[need] != nil:
			v.at(pos, "%s needs %q, which is an on_failure node; nodes cannot wait for compensation", w, need)
		case !onFailure && v.nodes[need] == nil:
			v.at(pos, "%s needs %q, which is not a node%s", w, need, didYouMean(need, ids(v.s.Nodes)))
		case onFailure && v.comps[need] == nil && v.nodes[need] != nil:
			v.at(pos, "%s needs %q, which is not an on_failure node; on_failure nodes may only need other on_failure nodes (the node they compensate has completed already)", w, need)
		case onFailure && v.comps[need] == nil:
			v.at(pos, "%s needs %q, which is not an on_failure node%s", w, need, didYouMean(need, ids(v.s.OnFailure)))
		}
		listed[need] = true
	}
}

func (v *validator) compensates(n *Node) {
	w := nodeName(n, true)
	pos := n.CompensatesPos
	if pos == (Pos{}) {
		pos = n.Pos
	}
	switch {
	case n.Compensates == "":
		v.at(pos, "%s: missing required field \"compensates\" (the id of the node it undoes)", w)
	case v.nodes[n.Compensates] == nil:
		v.at(pos, "%s compensates %q, which is not a node in nodes%s", w, n.Compensates, didYouMean(n.Compensates, ids(v.s.Nodes)))
	}
}

func ids(nodes []*Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.ID
	}
	return out
}

// cycles reports each cycle of needs once, as a path starting at its
// first node in file order, at that node's line.
func (v *validator) cycles(nodes []*Node, byID map[string]*Node) {
	const (
		unseen = iota
		onStack
		done
	)
	e := specEdges(nodes)
	state := make([]int, len(nodes))
	inReported := map[*Node]bool{}
	var stack []*Node
	var visit func(i int)
	visit = func(i int) {
		n := nodes[i]
		state[i] = onStack
		stack = append(stack, n)
		for _, j := range e.Needs[i] {
			if m := nodes[j]; byID[m.ID] != m || m == n {
				continue // an invalid id, or a self-need: reported by ids and needs
			}
			switch state[j] {
			case unseen:
				visit(j)
			case onStack:
				k := slices.Index(stack, nodes[j])
				v.cycle(slices.Clone(stack[k:]), inReported)
			}
		}
		stack = stack[:len(stack)-1]
		state[i] = done
	}
	for i, n := range nodes {
		if byID[n.ID] == n && state[i] == unseen {
			visit(i)
		}
	}
}

func (v *validator) cycle(cyc []*Node, inReported map[*Node]bool) {
	fresh := false
	for _, n := range cyc {
		fresh = fresh || !inReported[n]
		inReported[n] = true
	}
	if !fresh {
		return
	}
	// Start at the node that comes first in the file, so the same cycle
	// prints the same way whatever order the search found it in.
	start := 0
	for i, n := range cyc {
		if v.index[n] < v.index[cyc[start]] {
			start = i
		}
	}
	path := make([]string, 0, len(cyc)+1)
	for i := range cyc {
		path = append(path, cyc[(start+i)%len(cyc)].ID)
	}
	path = append(path, cyc[start].ID)
	v.at(cyc[start].Pos, "cycle: %s (each node needs the next)", strings.Join(path, " -> "))
}

// upstream returns the set of nodes that run before n and so whose
// outputs n may use: for a node, what it needs, transitively; for an
// on_failure node, the node it compensates and that node's upstream, and
// the on_failure nodes it needs, transitively.
func (v *validator) upstream(n *Node, onFailure bool) *upstreamSet {
	if !onFailure {
		return &upstreamSet{seen: map[string]bool{}, stack: []searchFrom{{n, v.nodes}}}
	}
	up := &upstreamSet{seen: map[string]bool{}, stack: []searchFrom{{n, v.comps}}}
	if c := v.nodes[n.Compensates]; c != nil {
		up.seen[c.ID] = true
		up.stack = append(up.stack, searchFrom{c, v.nodes})
	}
	return up
}

// upstreamSet answers whether a node is upstream of another, searching the
// needs graph only as far as the questions asked so far require. Most
// references name a direct need; building each node's whole upstream made
// validating a 5,000-node chain take seconds and a gigabyte of maps.
type upstreamSet struct {
	seen  map[string]bool
	stack []searchFrom // nodes whose needs are not yet in seen
}

type searchFrom struct {
	n    *Node
	byID map[string]*Node // the list n's needs name nodes of
}

func (u *upstreamSet) has(id string) bool {
	for !u.seen[id] && len(u.stack) > 0 {
		top := u.stack[len(u.stack)-1]
		u.stack = u.stack[:len(u.stack)-1]
		for _, need := range top.n.Needs {
			if m := top.byID[need]; m != nil && !u.seen[need] {
				u.seen[need] = true
				u.stack = append(u.stack, searchFrom{m, top.byID})
			}
		}
	}
	return u.seen[id]
}

func (v *validator) node(n *Node, onFailure bool) {
	if v.reg != nil && n.Type != "" {
		v.with(n, onFailure)
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
		v.at(pos, "%s references nodes.%s, which is not upstream of it; add it to needs", w, r.Name)
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

// with checks a node's type and its `with` block against the registry.
func (v *validator) with(n *Node, onFailure bool) {
	w := nodeName(n, onFailure)
	t, ok := v.reg.Lookup(n.Type)
	if !ok {
		pos := n.TypePos
		if pos == (Pos{}) {
			pos = n.Pos
		}
		known := v.reg.Names()
		v.at(pos, "%s: unknown type %q%s; known types: %s", w, n.Type, didYouMean(n.Type, known), listOrNone(known))
		return
	}
	w = fmt.Sprintf("%s (type %s)", w, n.Type)
	v.outputs(n, t, w)
	blockPos := n.WithPos
	if blockPos == (Pos{}) {
		blockPos = n.Pos
	}
	fields := map[string]Field{}
	var names []string
	for _, f := range t.Fields {
		fields[f.Name] = f
		names = append(names, f.Name)
	}
	bad := false
	for _, k := range slices.Sorted(maps.Keys(n.With)) {
		pos := n.WithKeyPos[k]
		if pos == (Pos{}) {
			pos = blockPos
		}
		f, ok := fields[k]
		switch {
		case ok:
			if msg := checkField(f.Type, n.With[k]); msg != "" {
				v.at(pos, "%s: with field %q %s", w, k, msg)
				bad = true
			}
		case t.OpenWith:
		case len(names) == 0:
			v.at(pos, "%s: unknown with field %q; type %s takes no with fields", w, k, n.Type)
			bad = true
		default:
			v.at(pos, "%s: unknown with field %q%s; known fields: %s", w, k, didYouMean(k, names), strings.Join(names, ", "))
			bad = true
		}
	}
	for _, f := range t.Fields {
		if _, ok := n.With[f.Name]; f.Required && !ok {
			v.at(blockPos, "%s: missing required with field %q", w, f.Name)
			bad = true
		}
	}
	// References to params whose default is known convert to the field
	// types now, as the run would, so a mismatch is found before it.
	if !bad {
		before := len(v.list)
		checkConversions(&v.errs, n, t.FieldTypes(), v.s.knownDefaults(), v.outs, blockPos)
		bad = len(v.list) > before
	}
	// Check may assume the fields have their declared types, so it only
	// runs on a block that passed the checks above. It gets a copy: a
	// careless Check must not change the spec.
	if !bad && t.Check != nil {
		with, _ := deepCopy(n.With).(map[string]any)
		if with == nil {
			with = map[string]any{}
		}
		if err := t.Check(with); err != nil {
			v.at(blockPos, "%s: %v", w, err)
		}
	}
}

// checkField checks a `with` value against its field type, returning what
// is wrong or "". A string holding "${" is only known at run time, and so
// passes, as do list items and map values that hold one.
func checkField(ft FieldType, v any) string {
	if _, ok := v.(string); ok && HasRef(v) {
		return "" // lists and maps are checked item by item below
	}
	switch ft {
	case FieldString:
		switch v.(type) {
		case string:
		case bool, int, float64:
			// YAML reads 5 and true as a number and a bool.
			return fmt.Sprintf("must be a string, got %s (quote it: \"%v\")", describeValue(v), v)
		default:
			return "must be a string, got " + describeValue(v)
		}
	case FieldInt:
		if _, ok := toInt64(v); !ok {
			return "must be an integer, got " + describeValue(v)
		}
	case FieldNumber:
		if _, ok := number.Of(v); !ok {
			return "must be a number, got " + describeValue(v)
		}
	case FieldBool:
		if _, ok := v.(bool); !ok {
			return "must be true or false, got " + describeValue(v)
		}
	case FieldDuration:
		s, ok := v.(string)
		if !ok {
			return `must be a duration such as "10m", got ` + describeValue(v)
		}
		if _, err := ParseDuration(s); err != nil {
			return "is not a valid duration: " + err.Error()
		}
	case FieldStringList, FieldIntList:
		list, ok := v.([]any)
		if !ok {
			return "must be a list of " + map[FieldType]string{FieldStringList: "strings", FieldIntList: "integers"}[ft] + ", got " + typeName(v)
		}
		itemType := map[FieldType]FieldType{FieldStringList: FieldString, FieldIntList: FieldInt}[ft]
		for i, item := range list {
			if msg := checkField(itemType, item); msg != "" {
				return fmt.Sprintf("item %d %s", i+1, msg)
			}
		}
	case FieldStringMap:
		m, ok := v.(map[string]any)
		if !ok {
			return "must be a mapping of strings, got " + typeName(v)
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if msg := checkField(FieldString, m[k]); msg != "" {
				return fmt.Sprintf("key %q %s", k, msg)
			}
		}
	}
	return ""
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
