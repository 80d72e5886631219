package dags

import (
	"fmt"
	"regexp"
	"strings"
)

// Queries (a canary check's PromQL) and the values that may go into them.
//
// Text spliced into a query rewrites it: a string param holding
// `5m])) * 0 + 1 or vector(1) #` turns a check into one that always
// passes. So a ${...} in a query field (FieldQuery) may only be a param of
// a type whose every value is a single PromQL token: duration, int or
// number, each checked when the run starts. Anything else (a string
// param, a node's output, an expression) is refused at validation.

// FieldQuery is a nested type for query text: a string whose ${...} may
// only be params of type duration, int or number.
const FieldQuery FieldType = "query"

// queryDurationRe is a duration both PromQL and ParseDuration read: whole
// numbers with units, largest first not enforced ("1h30m", "90s", "2d").
var queryDurationRe = regexp.MustCompile(`^([0-9]{1,9}(ms|s|m|h|d))+$`)

// CheckQueryDuration refuses what is not a duration a query may hold.
func CheckQueryDuration(s string) error {
	if !queryDurationRe.MatchString(s) {
		return fmt.Errorf(`want a duration such as "5m" or "1h30m" (whole numbers with ms, s, m, h or d), got %q`, truncate(s))
	}
	if _, err := ParseDuration(s); err != nil {
		return err
	}
	return nil
}

// queryTypes are the param types a query may take a value of.
var queryTypes = map[ParamType]bool{ParamDuration: true, ParamInt: true, ParamNumber: true}

// checkQueryRefs reports each ${...} in a FieldQuery value of n that is not
// a param of type duration, int or number.
func checkQueryRefs(e *errs, n *Node, fields []Field, params map[string]ParamType, blockPos Pos) {
	for _, f := range fields {
		raw, ok := n.With[f.Name]
		if !ok {
			continue
		}
		pos := n.WithKeyPos[f.Name]
		if pos == (Pos{}) {
			pos = blockPos
		}
		for _, nt := range f.Nested {
			if nt.Type != FieldQuery {
				continue
			}
			walkNested(raw, nil, strings.Split(nt.Path, "."), "with."+f.Name, func(path string, raw, _ any) {
				s, ok := raw.(string)
				if !ok {
					if raw != nil {
						e.at(pos, "node %s: %s: want query text, got %s", n.ID, path, describeValue(raw))
					}
					return
				}
				if msg := queryProblem(s, params); msg != "" {
					e.at(pos, "node %s: %s: %s", n.ID, path, msg)
				}
			})
		}
	}
}

// queryProblem says what in the query s may not be there, or "".
func queryProblem(s string, params map[string]ParamType) string {
	t, err := parseTemplate(s)
	if err != nil {
		return "" // reported where references are checked
	}
	for _, seg := range t {
		switch {
		case seg.secret != "":
			return "a query may not hold a ${secret...}: it is recorded with the run"
		case seg.expr != nil:
			return fmt.Sprintf("%s: a query takes params only as typed values, not expressions; declare a param of type duration or number and use ${params.NAME}", seg.source())
		case seg.ref == nil:
			continue
		case seg.ref.Kind != "params":
			return fmt.Sprintf("%s is spliced into a query as text, which can rewrite it: a query takes only params of type duration, int or number", seg.source())
		}
		typ, declared := params[seg.ref.Name]
		if !declared {
			continue // an unknown param is reported where references are checked
		}
		if typ == "" {
			typ = ParamString
		}
		if !queryTypes[typ] {
			return fmt.Sprintf("${params.%s} is a %s param spliced into a query as text, which can rewrite the query: declare it type: duration (a window such as 5m) or number, so that the run checks its value", seg.ref.Name, typ)
		}
	}
	return ""
}

// paramTypes are the declared types of the spec's params, by name.
func (s *Spec) paramTypes() map[string]ParamType {
	m := make(map[string]ParamType, len(s.Params))
	for _, p := range s.Params {
		m[p.Name] = p.Type
	}
	return m
}
