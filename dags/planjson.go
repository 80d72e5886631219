package dags

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// A plan is recorded in workflow history, where one payload may hold at
// most 2 MiB. Written field by field, a node cost ~232 bytes, most of it
// repeated: its type's kind, target and field types, and a retry policy,
// timeout and heartbeat that are the same for nearly every node. The wire
// form below writes each type's data once ("types") and the most common
// settings once ("node_defaults"); a node lists only what differs. Plans
// recorded before it carry every field on every node and decode as they
// did: a field present on the node wins.

// MaxPlanBytes is the largest encoded plan a run accepts: Temporal refuses
// payloads over 2 MiB, and the plan rides in the resolver's result with a
// little more.
const MaxPlanBytes = 1900 << 10

type planAlias Plan

type planWire struct {
	planAlias
	Types        map[string]planType `json:"types,omitempty"`
	NodeDefaults *planDefaults       `json:"node_defaults,omitempty"`
	Nodes        []nodeWire          `json:"nodes"`
	OnFailure    []nodeWire          `json:"on_failure,omitempty"`
}

// planType is what every node of one type shares.
type planType struct {
	Kind   Kind                 `json:"kind"`
	Target string               `json:"target"`
	Fields map[string]FieldType `json:"fields,omitempty"`
}

type planDefaults struct {
	Retry     RetryPolicy   `json:"retry"`
	Timeout   time.Duration `json:"timeout"`
	Heartbeat time.Duration `json:"heartbeat"`
}

type nodeAlias PlanNode

// nodeWire shadows the fields a node may leave to its type or to the
// plan's node_defaults.
type nodeWire struct {
	nodeAlias
	Kind      Kind                 `json:"kind,omitempty"`
	Target    string               `json:"target,omitempty"`
	Fields    map[string]FieldType `json:"fields,omitempty"`
	Retry     *RetryPolicy         `json:"retry,omitempty"`
	Timeout   *time.Duration       `json:"timeout,omitempty"`
	Heartbeat *time.Duration       `json:"heartbeat,omitempty"`
}

// MarshalJSON writes the compact form.
func (p Plan) MarshalJSON() ([]byte, error) {
	w := planWire{planAlias: planAlias(p), Types: map[string]planType{}}
	w.planAlias.Nodes, w.planAlias.OnFailure = nil, nil
	all := append(append([]PlanNode{}, p.Nodes...), p.OnFailure...)
	count := map[string]int{}
	var best string
	byKey := map[string]planDefaults{}
	for _, n := range all {
		if _, ok := w.Types[n.Type]; !ok {
			w.Types[n.Type] = planType{Kind: n.Kind, Target: n.Target, Fields: n.Fields}
		}
		d := planDefaults{Retry: n.Retry, Timeout: n.Timeout, Heartbeat: n.Heartbeat}
		k := fmt.Sprint(d)
		byKey[k] = d
		if count[k]++; count[k] > count[best] {
			best = k
		}
	}
	if len(all) > 0 {
		d := byKey[best]
		w.NodeDefaults = &d
	}
	enc := func(nodes []PlanNode) []nodeWire {
		if nodes == nil {
			return nil
		}
		out := make([]nodeWire, len(nodes))
		for i, n := range nodes {
			nw := nodeWire{nodeAlias: nodeAlias(n)}
			t := w.Types[n.Type]
			if n.Kind != t.Kind {
				nw.Kind = n.Kind
			}
			if n.Target != t.Target {
				nw.Target = n.Target
			}
			if !maps.Equal(n.Fields, t.Fields) {
				nw.Fields = n.Fields
			}
			d := w.NodeDefaults
			if !retryEqual(n.Retry, d.Retry) {
				nw.Retry = &n.Retry
			}
			if n.Timeout != d.Timeout {
				nw.Timeout = &n.Timeout
			}
			if n.Heartbeat != d.Heartbeat {
				nw.Heartbeat = &n.Heartbeat
			}
			out[i] = nw
		}
		return out
	}
	w.Nodes, w.OnFailure = enc(p.Nodes), enc(p.OnFailure)
	if w.Nodes == nil {
		w.Nodes = []nodeWire{}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the compact form and the one recorded before it.
func (p *Plan) UnmarshalJSON(b []byte) error {
	var w planWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*p = Plan(w.planAlias)
	dec := func(nodes []nodeWire) []PlanNode {
		if nodes == nil {
			return nil
		}
		out := make([]PlanNode, len(nodes))
		for i, nw := range nodes {
			n := PlanNode(nw.nodeAlias)
			t, hasType := w.Types[n.Type]
			n.Kind, n.Target, n.Fields = nw.Kind, nw.Target, nw.Fields
			if hasType {
				if n.Kind == "" {
					n.Kind = t.Kind
				}
				if n.Target == "" {
					n.Target = t.Target
				}
				if n.Fields == nil {
					n.Fields = t.Fields
				}
			}
			if d := w.NodeDefaults; d != nil {
				n.Retry, n.Timeout, n.Heartbeat = d.Retry, d.Timeout, d.Heartbeat
				n.Retry.NonRetryable = cloneStrings(d.Retry.NonRetryable)
			}
			if nw.Retry != nil {
				n.Retry = *nw.Retry
			}
			if nw.Timeout != nil {
				n.Timeout = *nw.Timeout
			}
			if nw.Heartbeat != nil {
				n.Heartbeat = *nw.Heartbeat
			}
			out[i] = n
		}
		return out
	}
	p.Nodes, p.OnFailure = dec(w.Nodes), dec(w.OnFailure)
	return nil
}

func retryEqual(a, b RetryPolicy) bool {
	return a.MaxAttempts == b.MaxAttempts && a.InitialInterval == b.InitialInterval &&
		a.Backoff == b.Backoff && a.MaxInterval == b.MaxInterval &&
		(a.NonRetryable == nil) == (b.NonRetryable == nil) && equalStrings(a.NonRetryable, b.NonRetryable)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}

// PlanSize is the length of the plan's JSON, as history records it.
func PlanSize(p *Plan) (int, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return 0, fmt.Errorf("dags: plan is not JSON: %w", err)
	}
	return len(b), nil
}

// checkPlanSize refuses, before any run starts, a plan that history could
// not record.
func checkPlanSize(s *Spec, p *Plan) error {
	size, err := PlanSize(p)
	if err != nil {
		return err
	}
	if size > MaxPlanBytes {
		return fmt.Errorf("%s: the compiled plan is %d bytes; a run can record at most %d (Temporal's payload limit is 2 MiB); make its with blocks smaller, split the pipeline, or fan out with foreach", s.File, size, MaxPlanBytes)
	}
	return nil
}
