package dags

import "testing"

// A secret reference is the worker's to resolve: the workflow keeps it
// as text, alone or mixed with references it does resolve.
func TestSecretRefStaysLiteral(t *testing.T) {
	sc := Scope{Params: map[string]any{"p": "v"}}
	for in, want := range map[string]any{
		"${secret.TOKEN}":            "${secret.TOKEN}",
		"Bearer ${secret.API_key_2}": "Bearer ${secret.API_key_2}",
		"${params.p}:${secret.X}":    "v:${secret.X}",
		"$${secret.X}":               "${secret.X}",
	} {
		got, err := Interpolate(in, sc)
		if err != nil || got != want {
			t.Errorf("Interpolate(%q) = %v, %v; want %q", in, got, err, want)
		}
		if HasRef(in) && in != "${params.p}:${secret.X}" {
			t.Errorf("HasRef(%q) = true; a secret is not a run-time value of the workflow", in)
		}
	}
	for _, bad := range []string{"${secret.}", "${secret.a-b}", "${secret.a.b}"} {
		if _, err := Interpolate(bad, sc); err == nil {
			t.Errorf("Interpolate(%q): no error for a malformed secret reference", bad)
		}
	}
}
