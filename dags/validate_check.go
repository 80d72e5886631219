package dags

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// A node type's Check sees a node's `with` with what is known before the
// run filled in: references to params whose value is known (their
// defaults at validation, the run's values when a run compiles its plan)
// are resolved, as the run would resolve them. A canary whose steps bake
// for ${params.bake} is then checked like one written out, rather than
// skipped as "known only at run time" until it fails after training.
// What stays unknown (another node's outputs, run values) is left as the
// ${...} it is, and Check skips it.

// knownWith returns with, its references to the params in known
// resolved, and for each top-level field the params it used.
func knownWith(with map[string]any, params map[string]any) (map[string]any, map[string][]string) {
	// A param whose value holds run values (a schedule's
	// ${date_add(run.logical_date, -1)}) is known only when the run
	// starts; a null one is left to the node (it may mean "not set").
	known := make(map[string]any, len(params))
	for k, v := range params {
		if v != nil && !HasRef(v) {
			known[k] = v
		}
	}
	out := make(map[string]any, len(with))
	used := map[string][]string{}
	for k, v := range with {
		var names []string
		out[k] = knownValue(v, known, &names)
		if len(names) > 0 {
			slices.Sort(names)
			used[k] = slices.Compact(names)
		}
	}
	return out, used
}

// knownValue resolves the strings of v whose references are all to params
// in known; the others are kept as written. A resolved string is
// re-escaped ("${" as "$${"), so that it reads as spec text again: a
// canary query's $${version} stays a placeholder, not a reference.
func knownValue(v any, known map[string]any, used *[]string) any {
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
			if _, ok := known[r.Name]; r.Kind != "params" || !ok {
				return x
			}
		}
		r, err := interpolateString(x, Scope{Params: known}, "", nil)
		if err != nil {
			return x
		}
		for _, r := range refs {
			*used = append(*used, r.Name)
		}
		return escapeText(r)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			out[k] = knownValue(item, known, used)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = knownValue(item, known, used)
		}
		return out
	}
	return v
}

// escapeText writes the strings of a resolved value as spec text: what
// was literal stays literal.
func escapeText(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "${", "$${")
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			out[k] = escapeText(item)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = escapeText(item)
		}
		return out
	}
	return v
}

// typeCheck runs t.Check on n's `with` as written, and when that passes
// and resolving the params in known changed it, on the resolved block,
// reporting each error at the line of the value it names. An error found
// only with params resolved says which, and how they were known
// (paramsAre: "at their defaults", "as given for this run"). Errors in
// the block as written keep their message (a reference as written says
// more than its default's value).
func typeCheck(e *errs, n *Node, t NodeType, w string, blockPos Pos, resolved map[string]any, used map[string][]string, paramsAre string) {
	if t.Check == nil {
		return
	}
	if errList := runCheck(t, n.With); len(errList) > 0 {
		reportCheck(e, n, w, blockPos, errList, nil, "")
		return
	}
	if len(used) == 0 {
		return
	}
	reportCheck(e, n, w, blockPos, runCheck(t, resolved), used, paramsAre)
}

// runCheck runs Check on a copy (a careless Check must not change the
// spec) and returns its errors one by one.
func runCheck(t NodeType, with map[string]any) []error {
	in, _ := deepCopy(with).(map[string]any)
	if in == nil {
		in = map[string]any{}
	}
	if err := t.Check(in); err != nil {
		return checkErrors(err)
	}
	return nil
}

func reportCheck(e *errs, n *Node, w string, blockPos Pos, errList []error, used map[string][]string, paramsAre string) {
	for _, ce := range errList {
		pos, field := blockPos, ""
		if fe, ok := errors.AsType[*FieldError](ce); ok {
			field = fe.Field
			pos = n.fieldPos(fe.Field, fe.Error(), blockPos)
		}
		msg := ce.Error()
		var names []string
		if field != "" {
			names = used[field]
		} else {
			for _, k := range slices.Sorted(maps.Keys(used)) {
				names = append(names, used[k]...)
			}
			slices.Sort(names)
			names = slices.Compact(names)
		}
		if len(names) > 0 {
			msg += fmt.Sprintf(" (checked with params %s %s)", strings.Join(names, ", "), paramsAre)
		}
		e.at(pos, "%s: %s", w, msg)
	}
}

// msgPathRe reads the path an error message starts with: "checks[0]",
// "steps[2].percent", "metrics.AUC".
var msgPathRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*(?:\[\d+\]|\.[A-Za-z_][A-Za-z0-9_-]*)*`)

// fieldPos is where an error in the `with` field named field belongs: at
// the nested value its message names when the spec placed it
// ("checks[0]: ..." at that check), else at the field's key.
func (n *Node) fieldPos(field, msg string, blockPos Pos) Pos {
	pos := n.WithKeyPos[field]
	if pos == (Pos{}) {
		pos = blockPos
	}
	path := msgPathRe.FindString(msg)
	if path != field && !strings.HasPrefix(path, field+".") && !strings.HasPrefix(path, field+"[") {
		return pos
	}
	// The longest prefix of the path the spec has a position for.
	for p := path; len(p) > len(field); {
		if at, ok := n.WithPaths[p]; ok {
			return at
		}
		i := strings.LastIndexAny(p, ".[")
		if i <= 0 {
			break
		}
		p = p[:i]
	}
	return pos
}

// compileChecks runs the node types' checks again with the run's params,
// for the nodes whose `with` resolves differently from the defaults
// validation used: a param given for the run can make a block no run
// could use (-p bake_2=oops), which must fail before any node runs.
// It returns the nodes it found errors in.
func compileChecks(e *errs, s *Spec, reg *Registry, bound, given map[string]any) map[*Node]bool {
	flagged := map[*Node]bool{}
	// As validateFor resolved them: the params the run gives left out.
	defaults := s.knownDefaults()
	for k := range given {
		delete(defaults, k)
	}
	for _, group := range [][]*Node{s.Nodes, s.OnFailure} {
		for _, n := range group {
			t, ok := reg.Lookup(n.Type)
			if !ok || t.Check == nil || len(n.With) == 0 {
				continue
			}
			atRun, used := knownWith(n.With, bound)
			atValidate, _ := knownWith(n.With, defaults)
			if reflect.DeepEqual(atRun, atValidate) {
				continue // validation checked exactly this
			}
			pos := n.WithPos
			if pos == (Pos{}) {
				pos = n.Pos
			}
			before := len(e.list)
			typeCheck(e, n, t, fmt.Sprintf("node %q (type %s)", n.ID, n.Type), pos, atRun, used, "as given for this run")
			if len(e.list) > before {
				flagged[n] = true
			}
		}
	}
	return flagged
}
