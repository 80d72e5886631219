package canary

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/models"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags"
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
	w["prometheus_hosts"] = []any{"127.0.0.1", "prometheus:9090"}
	if err := checkCanary(w); err != nil {
		t.Errorf("references are checked at run time: %v", err)
	}
}

// TestPrometheusURLFromParams: a prometheus_url a param or an output
// supplies may only choose a host the spec lists; its path and query are
// the spec's, and at run time the URL must be scheme://HOST[:PORT] with
// HOST listed.
func TestPrometheusURLFromParams(t *testing.T) {
	for _, tc := range []struct {
		url   string
		hosts []any
		want  string // "" for no error
	}{
		{"${params.prom}", nil, "prometheus_hosts"},
		{"http://${params.host}:9090", nil, "prometheus_hosts"},
		{"${params.prom}", []any{"127.0.0.1"}, ""},
		{"http://${params.host}:9090", []any{"prometheus"}, ""},
		{"http://${params.host}/internal/admin", []any{"prometheus"}, "no path, query"},
		{"http://prometheus:9090/${params.prefix}", []any{"prometheus"}, "no path, query"},
		{"http://${params.host}?x=1", []any{"prometheus"}, "no path, query"},
		{"${params.prom}", []any{"http://prometheus:9090"}, "not a host"},
		{"http://prometheus:9090/api?x=1", nil, "query or fragment"},
		{"http://prometheus:9090/#frag", nil, "query or fragment"},
		{"http://other:9090", []any{"prometheus"}, "not one of the spec's prometheus_hosts"},
	} {
		w := validWith()
		w["prometheus_url"] = tc.url
		if tc.hosts != nil {
			w["prometheus_hosts"] = tc.hosts
		}
		err := checkCanary(w)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s with hosts %v: %v, want %q", tc.url, tc.hosts, err, tc.want)
		}
	}
	// At run time, the resolved URL (the param's value) against the list.
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:9090", ""},
		{"http://127.0.0.1:8080/internal/admin/drop-all?confirm=yes&ignored=", "query or fragment"},
		{"http://127.0.0.1:8080/internal/admin/drop-all", "a path is refused"},
		{"http://127.0.0.1:8080/x#", "query or fragment"},
		{"http://127.0.0.1:8080?", "query or fragment"},
		{"http://10.0.0.1:9090", "not one of the spec's prometheus_hosts"},
		{"http://user@127.0.0.1:9090", "user information"},
	} {
		w := validWith()
		w["prometheus_url"] = tc.url
		w["prometheus_hosts"] = []any{"127.0.0.1"}
		_, _, err := decode(nodetype.Input{Node: "canary", With: w})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("run with %s: %v, want %q", tc.url, err, tc.want)
		}
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

// TestToleranceValidatedAtTheirLines: failure_limit below 1, a warmup
// longer than a step's bake and a Prometheus credential without a secret
// reference are refused at validation, at the field's line of the file.
func TestToleranceValidatedAtTheirLines(t *testing.T) {
	const head = `name: c
nodes:
  - id: canary
    type: canary
    with:
      model: ctr
      version: v2
      prometheus_url: http://prometheus:9090
      steps: [{percent: 10, bake: 1m}, {percent: 100}]
      checks: [{name: e, query: q, max: 1}]
`
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"ok", "      failure_limit: 3\n      warmup: 20s\n      prometheus_bearer_token: ${secret.PROM_TOKEN}\n      prometheus_headers: {X-Scope-OrgID: team-a, X-Api-Key: \"${secret.PROM_KEY}\"}\n", ""},
		{"failure_limit 0", "      failure_limit: 0\n", "c.yaml:11:7: node \"canary\" (type canary): failure_limit: want a whole number from 1"},
		{"check failure_limit 0", "", ""},
		{"warmup past the bake", "      warmup: 2m\n", "c.yaml:11:7: node \"canary\" (type canary): steps[0].warmup: 2m0s is longer than the step's bake 1m0s"},
		{"step warmup past the bake", "", ""},
		{"token in the clear", "      prometheus_bearer_token: abc123\n", "c.yaml:11:7: node \"canary\" (type canary): prometheus_bearer_token must hold a ${secret.NAME}"},
		{"token from a param", "      prometheus_bearer_token: ${params.tok}\n", "c.yaml:11:7: node \"canary\" (type canary): prometheus_bearer_token must hold a ${secret.NAME}"},
		{"auth header in the clear", "      warmup: 10s\n      prometheus_headers: {Authorization: Bearer abc}\n", "c.yaml:12:7: node \"canary\" (type canary): prometheus_headers: Authorization carries credentials"},
		{"basic auth password in the clear", "      prometheus_basic_auth: {username: u, password: p}\n", "c.yaml:11:7: node \"canary\" (type canary): prometheus_basic_auth: password must hold"},
	} {
		spec := head + tc.extra
		switch tc.name {
		case "check failure_limit 0":
			spec = strings.Replace(head, "max: 1}]", "max: 1, failure_limit: 0}]", 1)
			tc.want = "c.yaml:10:16: node \"canary\" (type canary): checks[0]: failure_limit: want a whole number from 1"
		case "step warmup past the bake":
			spec = strings.Replace(head, "bake: 1m}", "bake: 1m, warmup: 90s}", 1)
			tc.want = "c.yaml:9:39: node \"canary\" (type canary): steps[0].warmup: 1m30s is longer"
		}
		s, err := dags.Parse("c.yaml", []byte(spec))
		if err == nil {
			_, err = dags.Compile(s, nodetest.Registry(t, Type(&Activities{})), nil)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v\nwant an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestPrometheusHeaderResolved: credentials resolve from the worker's
// secrets where the spec wrote ${secret.NAME}; a param's text that looks
// like one is refused, not sent.
func TestPrometheusHeaderResolved(t *testing.T) {
	t.Setenv(progenv.SecretEnvPrefix+"PROM_TOKEN", "tok-123")
	with := validWith()
	with["prometheus_bearer_token"] = "${secret.PROM_TOKEN}"
	with["prometheus_headers"] = map[string]any{"X-Scope-OrgID": "team-a"}
	a := &Activities{Models: &models.Models{}}
	spans := []dags.SecretRef{{Path: "/prometheus_bearer_token", Spans: []dags.SecretSpan{{Name: "PROM_TOKEN", Start: 0}}}}
	h, secrets, err := a.prometheusHeader(t.Context(), nodetype.Input{Node: "canary", With: with, Secrets: spans})
	if err != nil || h.Get("Authorization") != "Bearer tok-123" || h.Get("X-Scope-OrgID") != "team-a" || len(secrets) != 1 || secrets[0] != "tok-123" {
		t.Fatalf("header %v, secrets %v, %v", h, secrets, err)
	}
	if _, _, err := a.prometheusHeader(t.Context(), nodetype.Input{Node: "canary", With: with, Secrets: []dags.SecretRef{}}); err == nil || !strings.Contains(err.Error(), "no ${secret.NAME} written in the spec") {
		t.Errorf("a token from a param: %v", err)
	}
}

// TestCanaryCancelledOnClose: a canary node's plan asks that a closing
// run cancel it (so it rolls back) rather than terminate it, and the
// recorded plan keeps that.
func TestCanaryCancelledOnClose(t *testing.T) {
	spec := `name: c
nodes:
  - id: canary
    type: canary
    with:
      model: ctr
      version: v2
      prometheus_url: http://prometheus:9090
      steps: [{percent: 10, bake: 1m}, {percent: 100}]
      checks: [{name: e, query: q, max: 1}]
`
	s, err := dags.Parse("c.yaml", []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := dags.Compile(s, nodetest.Registry(t, Type(&Activities{})), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back dags.Plan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !p.Nodes[0].CancelOnClose || !back.Nodes[0].CancelOnClose {
		t.Fatalf("cancel_on_close %v, after a round trip %v", p.Nodes[0].CancelOnClose, back.Nodes[0].CancelOnClose)
	}
}

// TestLeakySpecPatternsRefused: the spec patterns that leak a secret or
// redirect a request are validation errors at their field's line: a
// webhook carrying a secret whose host comes from a param, a
// prometheus_url from a param without a host list, and a string param
// spliced into PromQL.
func TestLeakySpecPatternsRefused(t *testing.T) {
	const head = `name: c
params:
  hook: {type: string, default: "http://serving:9201"}
  prom: {type: string, default: "http://prometheus:9090"}
  rate_window: {type: %s, default: "5m"}
nodes:
  - id: canary
    type: canary
    with:
      model: ctr
      version: v2
      prometheus_url: %s
      steps: [{percent: 10, bake: 1m}, {percent: 100}]
      checks: [{name: e, query: 'sum(rate(errors{version="$${version}"}[${params.rate_window}]))', max: 1}]
      webhooks: [%s]
`
	for _, tc := range []struct {
		name, typ, url, hook, want string
	}{
		{"ok", "duration", "http://prometheus:9090", `"https://serving.example/deployed?token=${secret.WEBHOOK_TOKEN}&from=${params.hook}"`, ""},
		{"hosts listed", "duration", "${params.prom}\n      prometheus_hosts: [prometheus]", `"${params.hook}"`, ""},
		{"secret to a param's host", "duration", "http://prometheus:9090", `"${params.hook}/deployed?token=${secret.WEBHOOK_TOKEN}"`,
			`c.yaml:15:7: node "canary" (type canary): webhook "${params.hook}/deployed?...": its scheme, host and path must be written in the spec because it carries a secret, but ${params.hook} supplies part of them`},
		{"secret to a param's path", "duration", "http://prometheus:9090", `"https://serving.example/${params.hook}?token=${secret.WEBHOOK_TOKEN}"`,
			`c.yaml:15:7: node "canary" (type canary): webhook "https://serving.example/${params.hook}?...": its scheme, host and path must be written`},
		{"prometheus from a param", "duration", "${params.prom}", `"${params.hook}"`,
			`c.yaml:12:7: node "canary" (type canary): prometheus_url "${params.prom}" takes part of the URL from a param or an output`},
		{"string param in PromQL", "string", "http://prometheus:9090", `"${params.hook}"`,
			`c.yaml:14:7: node canary: with.checks[0].query: ${params.rate_window} is a string param spliced into a query as text`},
	} {
		spec := fmt.Sprintf(head, tc.typ, tc.url, tc.hook)
		s, err := dags.Parse("c.yaml", []byte(spec))
		if err == nil {
			_, err = dags.Compile(s, nodetest.Registry(t, Type(&Activities{})), nil)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v\nwant an error with %q", tc.name, err, tc.want)
		}
	}
}
