package dags

import "gopkg.in/yaml.v3"

// Schedule is an entry of a spec's schedules: a cadence that starts runs
// of the pipeline, each with its own logical time. (Issue 11: to be
// filled in: fields, parsing and validation.)
type Schedule struct {
	ID  string
	Pos Pos
}

// schedules parses the spec's schedules list.
func (p *parser) schedules(n *yaml.Node) []*Schedule {
	p.errorf(n, "schedules are not supported yet")
	return nil
}

// schedules validates the spec's schedules.
func (v *validator) schedules() {}
