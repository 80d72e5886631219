package s3store

import "testing"

// TestDisplayEndpoint: an endpoint in a message loses its user info and
// any credential parameter, and keeps the rest.
func TestDisplayEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"":                                     "",
		"http://127.0.0.1:7070":                "http://127.0.0.1:7070",
		"https://key:secret@s3.example":        "https://s3.example",
		"https://s3.example/?X-Amz-Token=abc":  "https://s3.example/?X-Amz-Token=xxxxx",
		"https://s3.example/?region=eu-west-1": "https://s3.example/?region=eu-west-1",
	} {
		if got := displayEndpoint(in); got != want {
			t.Errorf("displayEndpoint(%q) = %q, want %q", in, got, want)
		}
	}
}
