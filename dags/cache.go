package dags

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// CacheSpec is a `cache:` setting as written, on a node or in defaults:
// `cache: true`, `cache: false`, or a mapping that turns caching on with
// a version (bumped to invalidate by hand) and the globs of files the
// node's programs read as code besides those named in its argv.
type CacheSpec struct {
	On         bool
	Version    int
	VersionSet bool // a node without its own version takes the defaults'
	Files      []string
	Pos        Pos
}

// PlanCache is how a plan node is cached; nil when it is not.
type PlanCache struct {
	Version int      `json:"version,omitempty"`
	Files   []string `json:"files,omitempty"`
}

var cacheFields = []string{"version", "files"}

// cache decodes a cache setting.
func (p *parser) cache(n *yaml.Node, what string) *CacheSpec {
	c := &CacheSpec{Pos: posOf(resolve(n))}
	if r := resolve(n); r.Kind == yaml.ScalarNode {
		if b, ok := p.bool(n, what); ok {
			c.On = b
		}
		return c
	}
	m, ok := p.mapping(n, what)
	if !ok {
		return c
	}
	c.On = true
	p.unknown(m, "in "+what, cacheFields, nil)
	if v := m.get("version"); v != nil {
		if x, ok := p.int(v, what+".version"); ok {
			if x < 0 {
				p.errorf(v, "%s.version must not be negative, got %d", what, x)
			}
			c.Version, c.VersionSet = x, true
		}
	}
	if v := m.opt("files"); v != nil {
		c.Files, _, _ = p.stringList(v, what+".files")
		for _, f := range c.Files {
			if f == "" {
				p.errorf(v, "%s.files: an empty glob", what)
			}
		}
	}
	return c
}

// cache checks a node's own cache setting: only a type without effects
// may be served from a cache, and a foreach node is not (its instances
// are not cached one by one).
func (v *validator) cache(n *Node, onFailure bool) {
	c := n.Cache
	if c == nil || !c.On || v.reg == nil {
		return
	}
	pos := c.Pos
	if pos == (Pos{}) {
		pos = n.Pos
	}
	t, ok := v.reg.Lookup(n.Type)
	switch {
	case !ok:
	case onFailure:
		v.at(pos, "%s: on_failure nodes undo effects and are never served from a cache; remove cache:", nodeName(n, onFailure))
	case !t.Cacheable:
		v.at(pos, "%s: type %s has effects on the world and is never served from a cache; remove cache:", nodeName(n, onFailure), n.Type)
	case n.Foreach != nil:
		v.at(pos, "%s: a foreach node is not cached; remove cache:", nodeName(n, onFailure))
	}
}

// planCache is a node's cache setting over the spec's defaults: the
// node's own when it has one (with the defaults' version unless it sets
// its own), else the defaults' for a type that may be cached by default
// (and is not a foreach or on_failure node).
func (s *Spec) planCache(t NodeType, n *Node) *PlanCache {
	c := n.Cache
	if c == nil {
		c = s.Defaults.Cache
		if c == nil || !t.Cacheable || t.CacheOptIn || n.Foreach != nil || n.Compensates != "" {
			return nil
		}
	}
	if !c.On {
		return nil
	}
	out := &PlanCache{Version: c.Version}
	if d := s.Defaults.Cache; !c.VersionSet && d != nil && d.VersionSet {
		out.Version = d.Version
	}
	if len(c.Files) > 0 {
		out.Files = append([]string{}, c.Files...)
	}
	return out
}

// String describes a cache setting for messages.
func (c *PlanCache) String() string {
	if c == nil {
		return "off"
	}
	return fmt.Sprintf("version %d", c.Version)
}
