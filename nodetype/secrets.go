package nodetype

import (
	"context"

	"github.com/retrain-ml/retrain/dags"
)

type secretRefsKey struct{}

// withSecretRefs makes a node's secret references (Input.Secrets)
// available to its step through ctx, so that code that resolves secrets
// several calls down (progenv) learns where they are without every step
// passing them along.
func withSecretRefs(ctx context.Context, refs []dags.SecretRef) context.Context {
	if refs == nil {
		// An input with no record at all was scheduled by a worker from
		// before the record existed (the field is always sent now, empty
		// when the spec wrote no reference): its references resolve as
		// they did then (LegacySecrets), so a rolling upgrade does not
		// break nodes in flight.
		return context.WithValue(ctx, secretRefsKey{}, legacy{})
	}
	if len(refs) == 0 {
		return ctx
	}
	byPath := make(map[string][]dags.SecretSpan, len(refs))
	literal := map[string]int{}
	for _, r := range refs {
		byPath[r.Path] = append(byPath[r.Path], r.Spans...)
		if r.Literal != nil {
			literal[r.Path] = *r.Literal
		}
	}
	ctx = context.WithValue(ctx, secretLiteralKey{}, literal)
	return context.WithValue(ctx, secretRefsKey{}, byPath)
}

type secretLiteralKey struct{}

// SecretLiteral returns how much of the string at path, from its start,
// is the spec's own text (dags.SecretRef.Literal); ok is false when the
// string holds no secret reference or its input did not record it.
func SecretLiteral(ctx context.Context, path string) (n int, ok bool) {
	m, _ := ctx.Value(secretLiteralKey{}).(map[string]int)
	n, ok = m[path]
	return n, ok
}

// WithSecretRefs is withSecretRefs for steps run outside Activity: tests,
// and activities of child workflows that pass a node's Input on.
func WithSecretRefs(ctx context.Context, refs []dags.SecretRef) context.Context {
	return withSecretRefs(ctx, refs)
}

// SecretSpans returns the spans of the spec's ${secret.NAME} references
// in the string at path (a JSON Pointer into the node's `with`, see
// dags.PointerTo), in order; none when the spec wrote none there.
func SecretSpans(ctx context.Context, path string) []dags.SecretSpan {
	byPath, _ := ctx.Value(secretRefsKey{}).(map[string][]dags.SecretSpan) // none for legacy inputs
	return byPath[path]
}

// legacy marks a node whose input predates the record of secret
// references.
type legacy struct{}

// LegacySecrets reports whether the running node's input was sent by a
// worker from before secret references were recorded: then every
// ${secret.NAME} in a secret-bearing field resolves, as it did then. New
// runs always send the record, so a client that may only start runs
// cannot get this behaviour.
func LegacySecrets(ctx context.Context) bool {
	_, ok := ctx.Value(secretRefsKey{}).(legacy)
	return ok
}
