package runs

import "testing"

// TestRunSummary: the Web UI names a run by its pipeline, also when it was
// started from a spec file.
func TestRunSummary(t *testing.T) {
	for _, c := range []struct {
		req  Request
		want string
	}{
		{Request{Pipeline: "ctr-retrain"}, "pipeline ctr-retrain"},
		{Request{Spec: []byte("name: hello\nnodes: []\n"), SpecFile: "hello.yaml"}, "pipeline hello (spec hello.yaml)"},
		{Request{Spec: []byte(`{"name": "x", "nodes": []}`)}, "pipeline x (spec given inline)"},
		{Request{Spec: []byte("nodes: [\n"), SpecFile: "broken.yaml"}, "spec broken.yaml"},
	} {
		if got := runSummary(c.req); got != c.want {
			t.Errorf("runSummary(%+v) = %q, want %q", c.req, got, c.want)
		}
	}
}
