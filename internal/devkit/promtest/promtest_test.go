package promtest_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/canary"
	"github.com/retrain-ml/retrain/internal/devkit/promtest"
	"github.com/retrain-ml/retrain/internal/devkit/servingsim"
)

// TestQueriesOnRealPrometheus scrapes the serving stand-in with a real
// Prometheus and reads CTR and p99 latency per version through
// canary.Prometheus, as a canary's checks do.
func TestQueriesOnRealPrometheus(t *testing.T) {
	if _, err := promtest.Binary(); err != nil {
		t.Skip(err)
	}
	sim := servingsim.New(2000, "v1", map[string]servingsim.Behaviour{
		"v1": {CTR: 0.10, Latency: 40 * time.Millisecond},
		"v2": {CTR: 0.05, Latency: 150 * time.Millisecond},
	})
	stop := make(chan struct{})
	defer close(stop)
	go sim.Run(stop)
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	prom, err := promtest.Start(t.Context(), t.TempDir(), []string{strings.TrimPrefix(srv.URL, "http://")}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()
	// Half the traffic to v2, as a canary webhook would say.
	if resp, err := srv.Client().Post(srv.URL+"/webhook", "application/json",
		strings.NewReader(`{"model":"ctr","production":"v1","canary":"v2","canary_percent":50}`)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("webhook: %v %v", resp, err)
	}
	p := canary.Prometheus{URL: prom.URL}
	ctr := `sum(rate(serving_clicks_total{version="${version}"}[5s])) / sum(rate(serving_impressions_total{version="${version}"}[5s]))`
	p99 := `histogram_quantile(0.99, sum by (le) (rate(serving_latency_seconds_bucket{version="${version}"}[5s])))`
	var got map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got = map[string]float64{}
		for _, v := range []string{"v1", "v2"} {
			for name, q := range map[string]string{"ctr": ctr, "p99": p99} {
				if x, err := p.Query(t.Context(), canary.QueryFor(q, v, ""), time.Now()); err != nil {
					t.Fatal(err)
				} else if x != nil && *x == *x {
					got[v+" "+name] = *x
				}
			}
		}
		if len(got) == 4 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("values: %v", got)
	if len(got) != 4 || got["v1 ctr"] < 0.099 || got["v1 ctr"] > 0.101 || got["v2 ctr"] < 0.049 || got["v2 ctr"] > 0.051 ||
		got["v1 p99"] > 0.05 || got["v2 p99"] < 0.1 || got["v2 p99"] > 0.2 {
		t.Fatalf("values %v: want ctr 0.10 and 0.05, p99 within (0.025, 0.05] and (0.1, 0.2]", got)
	}
	time.Sleep(3 * time.Second) // the ratio exists from its second scrape on
	pts, err := p.QueryRange(t.Context(), canary.QueryFor(ctr, "v1", ""), time.Now().Add(-6*time.Second), time.Now(), time.Second)
	if err != nil || len(pts) < 3 || pts[len(pts)-1].Value < 0.099 || pts[len(pts)-1].Value > 0.101 {
		t.Fatalf("range of v1's ctr: %v, %v; want 3 or more points near 0.10", pts, err)
	}
	if v, err := p.Query(t.Context(), canary.QueryFor(ctr, "v9", ""), time.Now()); err != nil || v != nil {
		t.Fatalf("a version without series: %v, %v; want no data", v, err)
	}
	if _, err := p.Query(t.Context(), "sum(rate(", time.Now()); err == nil {
		t.Fatal("a malformed query was accepted")
	}
}
