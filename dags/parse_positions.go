package dags

import (
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

func posOf(n *yaml.Node) Pos { return Pos{n.Line, n.Column} }

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.at(posOf(n), format, args...)
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (p *parser) syntaxError(err error) {
	msg := err.Error()
	if m := yamlLineRe.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		p.at(Pos{Line: line}, "syntax error: %s", m[2])
		return
	}
	// Some errors (bad encoding) come without a line; better none than a
	// wrong one.
	p.at(Pos{}, "syntax error: %s", strings.TrimPrefix(msg, "yaml: "))
}

// keyPos returns the position of a key, which is where messages about a
// block should point: a block mapping's value starts a line below.
func (m mapping) keyPos(key string) Pos {
	for _, kv := range m {
		if kv.key == key {
			return posOf(kv.k)
		}
	}
	return Pos{}
}
