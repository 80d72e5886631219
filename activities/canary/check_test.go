package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/nodetype"
)

func validWith() map[string]any {
	return map[string]any{
		"model": "ctr", "version": "v2", "prometheus_url": "http://prometheus:9090",
		"steps":  []any{map[string]any{"percent": 5.0, "bake": "30m"}, map[string]any{"percent": 100.0}},
		"checks": []any{map[string]any{"name": "p99", "query": `p99{version="${version}"}`, "max": 0.25}},
	}
}

// TestCheckCanary: a block no run could use is refused at validation,
// naming the field; references are left to run time.
func TestCheckCanary(t *testing.T) {
	if err := checkCanary(validWith()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  map[string]any
		want string
	}{
		{map[string]any{"version": nil, "dir": nil}, "give dir"},
		{map[string]any{"prometheus_url": "prometheus:9090"}, "prometheus_url"},
		{map[string]any{"steps": []any{map[string]any{"percent": 50.0, "bake": "1m"}}}, "must be 100"},
		{map[string]any{"checks": []any{map[string]any{"name": "x", "query": "q"}}}, "exactly one threshold"},
		{map[string]any{"alias": "production"}, "the production alias"},
		{map[string]any{"webhooks": []any{"ftp://x"}}, "not an http(s) URL"},
		{map[string]any{"model": "bad name!"}, "model"},
	} {
		w := validWith()
		for k, v := range tc.set {
			if v == nil {
				delete(w, k)
			} else {
				w[k] = v
			}
		}
		if err := checkCanary(w); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.set, err, tc.want)
		}
	}
	w := validWith()
	w["steps"] = "${params.steps}"
	w["prometheus_url"] = "${params.prom}"
	if err := checkCanary(w); err != nil {
		t.Errorf("references are checked at run time: %v", err)
	}
}

// TestBakesMustFitTheTimeout: a canary whose bakes outlast the node's
// timeout would time out mid-bake, still serving its share: refused.
func TestBakesMustFitTheTimeout(t *testing.T) {
	in := nodetype.Input{Node: "canary", With: validWith(), Options: &nodetype.Options{Timeout: 30 * time.Minute}}
	if _, _, err := decode(in); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("30m of bakes in a 30m timeout: %v", err)
	}
	in.Options.Timeout = time.Hour
	if _, _, err := decode(in); err != nil {
		t.Fatal(err)
	}
}
