// Package servingsim is a stand-in for a model serving system, for tests
// and demos of canary deploys: it serves impressions to the versions a
// canary webhook names, split as the webhook says, and exports what a real
// one would for Prometheus to scrape: per-version impression and click
// counters and a latency histogram. What each version does (its CTR, its
// latency, whether it slows down under load, whether it exports its
// series at all) is set by the test.
package servingsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Behaviour is what one version does with its traffic.
type Behaviour struct {
	CTR     float64       // clicks per impression
	Latency time.Duration // every request's latency
	// SlowAbove, when > 0: above this share of traffic (percent) the
	// version's latency is SlowLatency (it does not scale).
	SlowAbove   float64
	SlowLatency time.Duration
	// Label, when set, is the version label its series carry instead of
	// its version: a canary whose series the checks' queries miss.
	Label string
}

// Split is a traffic split as a canary's webhook sends it.
type Split struct {
	Model         string    `json:"model"`
	Production    string    `json:"production"`
	Canary        string    `json:"canary"`
	CanaryPercent float64   `json:"canary_percent"`
	Event         string    `json:"event"`
	Received      time.Time `json:"received"`
}

// Move is an alias move as a model's webhooks (and a deploy's) send it.
type Move struct {
	Model           string    `json:"model"`
	Alias           string    `json:"alias"`
	Version         string    `json:"version"`
	PreviousVersion string    `json:"previous_version"`
	Seq             int64     `json:"seq"`
	Kind            string    `json:"kind"`
	By              string    `json:"by"`
	Reason          string    `json:"reason"`
	Received        time.Time `json:"received"`
}

// ProductionAlias is the alias whose moves change what the stand-in
// serves.
const ProductionAlias = "production"

// Sim is the stand-in.
type Sim struct {
	moves []Move
	// down, when not 0, is the status every webhook call gets.
	down int

	mu         sync.Mutex
	versions   map[string]Behaviour
	production string
	canary     string
	percent    float64
	splits     []Split
	perSecond  float64

	reg         *prometheus.Registry
	impressions *prometheus.CounterVec
	clicks      *prometheus.CounterVec
	latency     *prometheus.HistogramVec
}

// New returns a stand-in serving perSecond impressions, all to production
// until a webhook says otherwise. versions' series are exported from the
// start (at zero), as a serving system exports the models it has loaded.
func New(perSecond float64, production string, versions map[string]Behaviour) *Sim {
	s := &Sim{versions: map[string]Behaviour{}, production: production, perSecond: perSecond, reg: prometheus.NewRegistry()}
	s.impressions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "serving_impressions_total", Help: "Ads served, by model version."}, []string{"version"})
	s.clicks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "serving_clicks_total", Help: "Clicks on ads served, by model version."}, []string{"version"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "serving_latency_seconds", Help: "Request latency, by model version.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2},
	}, []string{"version"})
	s.reg.MustRegister(s.impressions, s.clicks, s.latency)
	for v, b := range versions {
		s.Set(v, b)
	}
	return s
}

// Set sets what version does from now on.
func (s *Sim) Set(version string, b Behaviour) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.versions[version] = b
	l := s.label(version)
	s.impressions.WithLabelValues(l)
	s.clicks.WithLabelValues(l)
	s.latency.WithLabelValues(l)
}

func (s *Sim) label(version string) string {
	if b := s.versions[version]; b.Label != "" {
		return b.Label
	}
	return version
}

// Splits returns the splits webhooks sent, oldest first.
func (s *Sim) Splits() []Split {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Split(nil), s.splits...)
}

// Moves returns the alias moves webhooks sent, oldest first.
func (s *Sim) Moves() []Move {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Move(nil), s.moves...)
}

// Serving returns the version production traffic goes to.
func (s *Sim) Serving() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.production
}

// SetDown makes every webhook call answer status (503, say) without
// looking at it, as a serving system that is down; 0 brings it back.
func (s *Sim) SetDown(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = status
}

// Handler serves /metrics (for Prometheus) and /webhook: a canary's
// traffic splits, and alias moves (a deploy's or a model's webhooks),
// of which a move of production switches all traffic to its version.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /webhook", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		down := s.down
		s.mu.Unlock()
		if down != 0 {
			http.Error(w, "serving is down", down)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var mv Move
		if err := json.Unmarshal(body, &mv); err == nil && mv.Alias != "" && mv.Version != "" {
			mv.Received = time.Now()
			s.mu.Lock()
			s.moves = append(s.moves, mv)
			if mv.Alias == ProductionAlias {
				s.production, s.canary, s.percent = mv.Version, "", 0
			}
			s.mu.Unlock()
			return
		}
		var sp Split
		if err := json.Unmarshal(body, &sp); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if sp.CanaryPercent < 0 || sp.CanaryPercent > 100 || sp.Production == "" {
			http.Error(w, fmt.Sprintf("bad split %+v", sp), http.StatusBadRequest)
			return
		}
		sp.Received = time.Now()
		s.mu.Lock()
		s.production, s.canary, s.percent = sp.Production, sp.Canary, sp.CanaryPercent
		s.splits = append(s.splits, sp)
		s.mu.Unlock()
	})
	return mux
}

// tick is how often traffic is served.
const tick = 100 * time.Millisecond

// Run serves traffic until stop is closed.
func (s *Sim) Run(stop <-chan struct{}) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.serve(s.perSecond * tick.Seconds())
		}
	}
}

// serve sends n impressions, split between production and the canary.
func (s *Sim) serve(n float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	shares := map[string]float64{s.production: 100}
	if s.canary != "" && s.canary != s.production {
		shares = map[string]float64{s.production: 100 - s.percent, s.canary: s.percent}
	}
	versions := make([]string, 0, len(shares))
	for v := range shares {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		share := shares[v]
		if share <= 0 {
			continue
		}
		b := s.versions[v]
		imp := n * share / 100
		l := s.label(v)
		s.impressions.WithLabelValues(l).Add(imp)
		s.clicks.WithLabelValues(l).Add(imp * b.CTR)
		lat := b.Latency
		if b.SlowAbove > 0 && share > b.SlowAbove {
			lat = b.SlowLatency
		}
		h := s.latency.WithLabelValues(l)
		for range max(1, int(imp/10)) {
			h.Observe(lat.Seconds())
		}
	}
}
