package dags

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/number"
)

// Compile validates s against reg, binds params and resolves every default,
// giving the Plan a run executes. params are the values given for the run:
// typed (decoded from JSON) or strings (from a command line), coerced to
// each param's declared type; params not given take their defaults.
func Compile(s *Spec, reg *Registry, params map[string]any) (*Plan, error) {
	if reg == nil {
		return nil, errors.New("dags: Compile needs a registry")
	}
	if err := s.validateFor(reg, params); err != nil {
		return nil, err
	}
	bound, err := s.BindParams(params)
	if err != nil {
		return nil, err
	}
	// With the params bound, references to them are known: check that they
	// convert to their fields' types before any node runs.
	e := errs{file: s.File}
	checkParamValues(&e, s, bound) // limits.go
	outs := s.declaredOutputs()
	for _, group := range [][]*Node{s.Nodes, s.OnFailure} {
		for _, n := range group {
			t, _ := reg.Lookup(n.Type)
			pos := n.WithPos
			if pos == (Pos{}) {
				pos = n.Pos
			}
			checkConversions(&e, n, t.FieldTypes(), bound, outs, pos)
		}
	}
	// The node types' checks with the run's params: first as validation
	// ran them, spec text with nested positions (validate_check.go),
	// then on the converted values the nodes will get (checkbound.go),
	// for the nodes the first found nothing in.
	var flagged map[*Node]bool
	if len(e.list) == 0 { // Check may assume the fields convert
		flagged = compileChecks(&e, s, reg, bound, params)
	}
	for _, group := range [][]*Node{s.Nodes, s.OnFailure} {
		for _, n := range group {
			if flagged[n] {
				continue
			}
			t, _ := reg.Lookup(n.Type)
			pos := n.WithPos
			if pos == (Pos{}) {
				pos = n.Pos
			}
			checkBound(&e, n, t, bound, outs, pos)
		}
	}
	if err := e.list.Err(); err != nil {
		return nil, err
	}
	digest, err := ParamsDigest(bound)
	if err != nil {
		return nil, err
	}
	plan := &Plan{
		Pipeline:     s.Name,
		Source:       s.File,
		Parallelism:  cmp.Or(s.Parallelism, DefaultParallelism),
		Params:       bound,
		ParamsDigest: digest,
		WaitFor:      cloneWaits(s.WaitFor),
	}
	for _, n := range topoOrder(s.Nodes) {
		plan.Nodes = append(plan.Nodes, s.planNode(reg, n))
	}
	for _, n := range topoOrder(s.OnFailure) {
		plan.OnFailure = append(plan.OnFailure, s.planNode(reg, n))
	}
	if err := checkPlanSize(s, plan); err != nil {
		return nil, err
	}
	return plan, nil
}

// ParamsDigest returns the first 16 hex digits of the SHA-256 of the JSON
// of params. encoding/json sorts map keys and prints numbers in one way, so
// equal values give equal digests whatever their map order or Go number
// type: a cheap key for "has this pipeline already run with these params".
func ParamsDigest(params map[string]any) (string, error) {
	if params == nil {
		params = map[string]any{}
	}
	b, err := json.Marshal(params)
	if err != nil {
		return "", fmt.Errorf("dags: params are not JSON: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16], nil
}

// BindParams returns the value of every declared param: the given one,
// coerced to the declared type, or the default. Unknown and missing params
// are errors.
func (s *Spec) BindParams(given map[string]any) (map[string]any, error) {
	e := errs{file: s.File}
	out := make(map[string]any, len(s.Params))
	names := make([]string, len(s.Params))
	for i, p := range s.Params {
		names[i] = p.Name
	}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if s.Param(name) == nil {
			e.at(s.ParamsPos, "unknown param %q%s; declared params: %s", name, didYouMean(name, names), listOrNone(names))
		}
	}
	for _, p := range s.Params {
		v, ok := given[p.Name]
		switch {
		case ok && v == nil && !(p.HasDefault && p.Default == nil):
			e.at(p.Pos, "param %q (%s) must not be null", p.Name, p.Type)
		case ok:
			c, err := coerceParam(p.Type, v)
			if err != nil {
				e.at(p.Pos, "param %q: %v", p.Name, err)
				continue
			}
			if err := checkParamRefs(p.Name, c); err != nil {
				e.at(p.Pos, "%v", err)
				continue
			}
			out[p.Name] = c
		case p.HasDefault:
			if err := checkParamRefs(p.Name, p.Default); err != nil {
				e.at(p.Pos, "%v", err)
				continue
			}
			out[p.Name] = deepCopy(p.Default)
		default:
			e.at(p.Pos, "missing required param %q (%s)", p.Name, p.Type)
		}
	}
	if err := e.list.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// coerceParam converts v to a param type. Values arrive typed from JSON or
// YAML (float64 for every JSON number) or as text from a command line.
func coerceParam(t ParamType, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	s, isStr := v.(string)
	switch t {
	case ParamString, "":
		if isStr {
			return s, nil
		}
		switch v.(type) {
		case bool, json.Number:
		default:
			if _, ok := number.Of(v); !ok {
				return nil, fmt.Errorf("want a string, got %s", typeName(v))
			}
		}
		return format(v)
	case ParamInt:
		if isStr {
			if i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 0); err == nil {
				return int(i), nil
			}
			f, ok := numericString(s)
			if !ok {
				return nil, fmt.Errorf("want an integer, got %q", s)
			}
			v = f
		}
		if _, ok := number.Of(v); !ok {
			return nil, fmt.Errorf("want an integer, got %s", typeName(v))
		}
		i, ok := toInt64(v)
		if !ok || i < math.MinInt || i > math.MaxInt {
			return nil, fmt.Errorf("want an integer, got %s", describeValue(v))
		}
		return int(i), nil
	case ParamNumber:
		if isStr {
			f, ok := numericString(s)
			if !ok {
				return nil, fmt.Errorf("want a number, got %q", s)
			}
			return f, nil
		}
		f, ok := number.Of(v)
		if !ok {
			return nil, fmt.Errorf("want a number, got %s", typeName(v))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("want a finite number, got %v", f)
		}
		return f, nil
	case ParamDuration:
		if !isStr {
			return nil, fmt.Errorf(`want a duration such as "5m" or "1h30m", got %s`, describeValue(v))
		}
		if err := CheckQueryDuration(s); err != nil {
			return nil, err
		}
		return s, nil
	case ParamBool:
		if isStr {
			switch strings.ToLower(strings.TrimSpace(s)) {
			case "true":
				return true, nil
			case "false":
				return false, nil
			}
			return nil, fmt.Errorf("want true or false, got %q", s)
		}
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, fmt.Errorf("want true or false, got %s", typeName(v))
	case ParamList, ParamMap:
		if isStr {
			var x any
			if err := json.Unmarshal([]byte(s), &x); err != nil {
				return nil, fmt.Errorf("want a %s as JSON text, got %q: %v", t, s, err)
			}
			v = x
		} else {
			// Normalise Go values ([]string, map[string]int...) to the
			// shapes a JSON round trip gives, as the plan will have.
			x, err := normalizeJSON(v)
			if err != nil {
				return nil, fmt.Errorf("want a %s: %v", t, err)
			}
			v = x
		}
		switch v.(type) {
		case []any:
			if t == ParamList {
				return v, nil
			}
		case map[string]any:
			if t == ParamMap {
				return v, nil
			}
		}
		return nil, fmt.Errorf("want a %s, got %s", t, typeName(v))
	}
	return nil, fmt.Errorf("unknown param type %q", t)
}

// normalizeJSON returns v as a JSON round trip gives it back.
func normalizeJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// planNode resolves a validated node's settings: the node's own, over the
// spec's defaults, over the node type's, over the built-in ones.
func (s *Spec) planNode(reg *Registry, n *Node) PlanNode {
	t, _ := reg.Lookup(n.Type)
	pn := PlanNode{
		ID:            n.ID,
		Type:          n.Type,
		Kind:          t.Kind,
		Target:        t.Target,
		When:          n.When,
		Retry:         s.retryPolicy(n),
		Timeout:       firstDuration(n.Timeout, s.Defaults.Timeout, DefaultTimeout),
		Heartbeat:     firstDuration(n.Heartbeat, s.Defaults.Heartbeat, DefaultHeartbeat),
		Queue:         t.Queue,
		Compensates:   n.Compensates,
		Fields:        t.FieldTypes(),
		CancelOnClose: t.CancelOnClose,
		Cache:         s.planCache(t, n),
		Provenance:    t.Provenance,
		WaitFor:       cloneWaits(n.WaitFor),
		PinsSnapshot:  hasFields(t, "table", "snapshot_id"),
	}
	if len(n.Needs) > 0 {
		pn.Needs = append([]string{}, n.Needs...)
	}
	if len(n.With) > 0 {
		pn.With = deepCopy(n.With).(map[string]any)
	}
	if len(n.Outputs) > 0 {
		pn.Outputs = maps.Clone(n.Outputs)
	}
	if t.Hosts != nil {
		h := *t.Hosts
		pn.Hosts = &h
	}
	if f := n.Foreach; f != nil {
		pn.Foreach = &PlanForeach{Expr: f.Expr, MaxParallel: cmp.Or(f.MaxParallel, s.Parallelism, DefaultParallelism), FailFast: f.FailFast}
	}
	if s.Defaults.Queue != nil {
		pn.Queue = *s.Defaults.Queue
	}
	if n.Queue != nil {
		pn.Queue = *n.Queue
	}
	return pn
}

func (s *Spec) retryPolicy(n *Node) RetryPolicy {
	return n.Retry.over(s.Defaults.Retry.over(DefaultRetry()))
}

func firstDuration(own, def *time.Duration, builtin time.Duration) time.Duration {
	switch {
	case own != nil:
		return *own
	case def != nil:
		return *def
	}
	return builtin
}

// topoOrder orders nodes so that each comes after those it needs, keeping
// file order among nodes that are ready together, so that a plan is the
// same for the same file. Needs naming nodes outside the list are ignored;
// nodes on a cycle (which Validate rejects) come last in file order.
func topoOrder(nodes []*Node) []*Node {
	e := specEdges(nodes)
	pending := make([]int, len(nodes)) // unmet needs of each node
	for i := range nodes {
		pending[i] = len(e.Needs[i])
	}
	// ready is kept sorted by file index; specs are small, so an insertion
	// sort beats a heap in clarity at no real cost.
	var ready []int
	insert := func(i int) {
		k := len(ready)
		ready = append(ready, i)
		for k > 0 && ready[k-1] > i {
			ready[k] = ready[k-1]
			k--
		}
		ready[k] = i
	}
	for i := range nodes {
		if pending[i] == 0 {
			insert(i)
		}
	}
	out := make([]*Node, 0, len(nodes))
	done := make([]bool, len(nodes))
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		done[i] = true
		out = append(out, nodes[i])
		for _, j := range e.Dependents[i] {
			if pending[j]--; pending[j] == 0 {
				insert(j)
			}
		}
	}
	for i, n := range nodes {
		if !done[i] {
			out = append(out, n)
		}
	}
	return out
}

// hasFields reports whether t declares every one of the named fields.
func hasFields(t NodeType, names ...string) bool {
	for _, name := range names {
		if !slices.ContainsFunc(t.Fields, func(f Field) bool { return f.Name == name }) {
			return false
		}
	}
	return true
}
