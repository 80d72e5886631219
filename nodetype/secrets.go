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
	if len(refs) == 0 {
		return ctx
	}
	byPath := make(map[string][]dags.SecretSpan, len(refs))
	for _, r := range refs {
		byPath[r.Path] = append(byPath[r.Path], r.Spans...)
	}
	return context.WithValue(ctx, secretRefsKey{}, byPath)
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
	byPath, _ := ctx.Value(secretRefsKey{}).(map[string][]dags.SecretSpan)
	return byPath[path]
}
