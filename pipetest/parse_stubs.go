package pipetest

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

var stubKeys = []string{"run", "outputs", "error", "attempts", "approve", "reject", "canary"}

func (p *parser) stub(k, n *yaml.Node, what string) *Stub {
	s := &Stub{Node: k.Value, Pos: pos(k)}
	what = fmt.Sprintf("%s: stub %s", what, k.Value)
	if n.Kind == yaml.ScalarNode && n.Value == "run" {
		s.Run = true // `node: run`, short for {run: true}
		return s
	}
	forms := 0
	var single Attempt
	for _, kv := range p.pairs(n, what, stubKeys...) {
		key, v := kv[0].Value, kv[1]
		switch key {
		case "run":
			if v.Value != "true" && v.Value != "false" {
				p.at(v, "%s: run: want true or false", what)
			}
			s.Run = v.Value == "true"
			forms++
		case "outputs":
			single.Pos = pos(kv[0])
			single.Outputs, single.OutputsPos = p.mapping(v, what+": outputs")
			forms++
		case "error":
			single.Pos = pos(kv[0])
			single.Error = p.stubError(v, what+": error")
			forms++
		case "attempts":
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				p.at(v, "%s: attempts: want a list of {outputs} or {error}, one per attempt", what)
				continue
			}
			for j, an := range v.Content {
				s.Attempts = append(s.Attempts, p.attempt(an, fmt.Sprintf("%s: attempts[%d]", what, j)))
			}
			forms++
		case "approve":
			s.Approve = p.decision(v, what+": approve")
		case "reject":
			s.Reject = p.decision(v, what+": reject")
		case "canary":
			s.Canary = p.canary(v, what+": canary")
			forms++
		}
	}
	if single.Outputs != nil || single.Error != nil {
		s.Attempts = []Attempt{single}
	}
	switch {
	case forms == 0:
		p.at(k, "%s: give outputs, error, attempts, canary or run: true", what)
	case forms > 1:
		p.at(k, "%s: give one of outputs, error, attempts, canary and run: true", what)
	case !s.Run && s.Canary == nil && (s.Approve != nil || s.Reject != nil):
		p.at(k, "%s: approve and reject go with a gate that runs (run: true) or a canary stub", what)
	}
	if s.Approve != nil && s.Reject != nil {
		p.at(k, "%s: give approve or reject, not both", what)
	}
	return s
}

func (p *parser) attempt(n *yaml.Node, what string) Attempt {
	a := Attempt{Pos: pos(n)}
	for _, kv := range p.pairs(n, what, "outputs", "error") {
		switch kv[0].Value {
		case "outputs":
			a.Outputs, a.OutputsPos = p.mapping(kv[1], what+": outputs")
		case "error":
			a.Error = p.stubError(kv[1], what+": error")
		}
	}
	if (a.Outputs == nil) == (a.Error == nil) {
		p.at(n, "%s: give outputs or error", what)
	}
	return a
}

// DefaultErrorType is a stubbed error's type when it names none.
const DefaultErrorType = "StubError"

func (p *parser) stubError(n *yaml.Node, what string) *StubError {
	e := &StubError{Type: DefaultErrorType, Message: "stubbed failure", Retryable: true}
	if n.Kind == yaml.ScalarNode {
		e.Message = n.Value // `error: message`
		return e
	}
	for _, kv := range p.pairs(n, what, "type", "message", "retryable") {
		switch kv[0].Value {
		case "type":
			e.Type = p.str(kv[1], what+".type")
		case "message":
			e.Message = p.str(kv[1], what+".message")
		case "retryable":
			if kv[1].Value != "true" && kv[1].Value != "false" {
				p.at(kv[1], "%s.retryable: want true or false", what)
			}
			e.Retryable = kv[1].Value != "false"
		}
	}
	return e
}

func (p *parser) decision(n *yaml.Node, what string) *Decision {
	d := &Decision{Pos: pos(n), By: "retrain-test", Reason: "approved in a test"}
	if strings.HasSuffix(what, "reject") {
		d.Reason = "rejected in a test"
	}
	for _, kv := range p.pairs(n, what, "step", "after", "by", "reason") {
		switch kv[0].Value {
		case "step":
			d.Step = p.integer(kv[1], what+".step")
			if d.Step < 1 {
				p.at(kv[1], "%s.step: steps count from 1", what)
			}
		case "after":
			d.After = p.duration(kv[1], what+".after")
		case "by":
			d.By = p.str(kv[1], what+".by")
		case "reason":
			d.Reason = p.str(kv[1], what+".reason")
		}
	}
	return d
}

func (p *parser) canary(n *yaml.Node, what string) *CanaryStub {
	c := &CanaryStub{Pos: pos(n), Version: "v2", Production: "v1"}
	for _, kv := range p.pairs(n, what, "version", "production", "steps") {
		switch kv[0].Value {
		case "version":
			c.Version = p.str(kv[1], what+".version")
		case "production":
			c.Production = p.str(kv[1], what+".production")
		case "steps":
			if kv[1].Kind != yaml.SequenceNode {
				p.at(kv[1], "%s.steps: want a list, one entry per baked step: {CHECK: value, ...}", what)
				continue
			}
			for j, sn := range kv[1].Content {
				c.Steps = append(c.Steps, p.canaryStep(sn, fmt.Sprintf("%s.steps[%d]", what, j)))
				c.StepsPos = append(c.StepsPos, pos(sn))
			}
		}
	}
	if c.Version == c.Production {
		p.at(n, "%s: version and production are both %q: a canary needs two versions", what, c.Version)
	}
	return c
}

func (p *parser) canaryStep(n *yaml.Node, what string) map[string]Sample {
	out := map[string]Sample{}
	for _, kv := range p.pairs(n, what) {
		name, v := kv[0].Value, kv[1]
		if v.Kind == yaml.ScalarNode {
			out[name] = Sample{Canary: p.number(v, what+"."+name)}
			continue
		}
		var s Sample
		for _, f := range p.pairs(v, what+"."+name, "canary", "production", "count") {
			x := p.number(f[1], what+"."+name+"."+f[0].Value)
			switch f[0].Value {
			case "canary":
				s.Canary = x
			case "production":
				s.Production = x
			case "count":
				s.Count = x
			}
		}
		out[name] = s
	}
	return out
}

// number reads a number, or null (no data).
func (p *parser) number(n *yaml.Node, what string) *float64 {
	if n.ShortTag() == "!!null" {
		return nil
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if n.Kind != yaml.ScalarNode || err != nil {
		p.at(n, "%s: want a number or null (no data)", what)
		return nil
	}
	return &f
}
