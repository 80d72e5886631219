package progenv

import "github.com/retrain-ml/retrain/nodetype"

// Masker hides secret values, their lines and their escaped forms in text
// and JSON values; see nodetype.Masker. It lives in nodetype so that the
// activity wrapper, which masks every node's outputs and errors with the
// secrets Resolve noted (nodetype.NoteSecrets), uses the same algorithm.
type Masker = nodetype.Masker

// NewMasker returns a Masker of secrets.
func NewMasker(secrets []string) *Masker { return nodetype.NewMasker(secrets) }

// MaskString replaces each of secrets in s with ***: the values, each
// line of a multi-line one, and their %q, JSON and URL-escaped forms.
func MaskString(s string, secrets []string) string {
	return NewMasker(secrets).String(s)
}

// MaskValue returns v, a JSON value (maps, lists, strings, numbers), with
// each of secrets masked in its strings and map keys, as MaskString does.
func MaskValue(v any, secrets []string) any {
	return NewMasker(secrets).Value(v)
}
