package progenv

import (
	"fmt"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/nodetype"
)

// TestResolveNotesSecrets: the secrets Resolve puts into a program's
// environment are noted in the node's context, so the activity wrapper
// masks them in whatever the node returns, escaped forms and lines too.
func TestResolveNotesSecrets(t *testing.T) {
	const pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34GkxFhD9\n-----END KEY-----"
	t.Setenv("RETRAIN_SECRET_PEM", pem)
	ctx, with := resolveCtx(t, map[string]any{"env": map[string]any{"K": "${secret.PEM}"}}, nil)
	ctx = nodetype.WithSecretRegistry(ctx)
	if _, err := (Policy{}).Resolve(ctx, "env", envOf(t, with["env"])); err != nil {
		t.Fatal(err)
	}
	m := nodetype.SecretMasker(ctx)
	for _, s := range []string{
		fmt.Sprintf("parse %q: bad", pem),
		"line: MIIBOgIBAAJBAKj34GkxFhD9",
	} {
		if got := m.String(s); strings.Contains(got, "MIIBOg") || strings.Contains(got, "BEGIN KEY") {
			t.Errorf("%q masked as %q", s, got)
		}
	}
	if got := MaskString(fmt.Sprintf("%q", pem), []string{pem}); got != `"***"` {
		t.Errorf("MaskString %q", got)
	}
	if got := MaskValue(map[string]any{"a": []any{"x " + pem}}, []string{pem}); fmt.Sprint(got) != "map[a:[x ***]]" {
		t.Errorf("MaskValue %v", got)
	}
}
