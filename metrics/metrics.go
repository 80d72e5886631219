// Package metrics exports Temporal SDK metrics, and whatever else is
// recorded through the same handler, in the Prometheus text format.
//
// Handler implements the SDK's client.MetricsHandler directly on
// client_golang, so retrain needs no tally bridge. The SDK creates series
// lazily with tag sets that differ between call sites of one metric name
// (a request metric with and without a task queue, say); Prometheus wants
// one label set per family, so Collect pads every series of a family with
// the family's other label names set to "" (which Prometheus treats as an
// absent label).
//
// Counters keep the SDK's names (temporal_workflow_completed), gauges too;
// timers become histograms in seconds named NAME_seconds.
package metrics

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// Buckets are the timers' histogram bounds in seconds: from a fast
// activity to a day-long training step.
var Buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

type kind int

const (
	kindCounter kind = iota
	kindGauge
	kindHistogram
)

// Registry holds every series recorded through its handlers. It is a
// prometheus.Collector.
type Registry struct {
	mu       sync.Mutex
	families map[string]*family
	help     map[string]string
}

type family struct {
	kind   kind
	series map[string]*series // by canonical label string
}

type series struct {
	labels map[string]string

	mu      sync.Mutex
	value   float64  // counter or gauge
	buckets []uint64 // histogram: counts per bound in Buckets, not cumulative
	count   uint64
	sum     float64
}

// NewRegistry returns an empty registry. help gives the HELP text of
// metric names that have one (others get a generic text).
func NewRegistry(help map[string]string) *Registry {
	return &Registry{families: map[string]*family{}, help: maps.Clone(help)}
}

// Handler returns the SDK metrics handler recording into r.
func (r *Registry) Handler() client.MetricsHandler { return handler{r: r} }

// Describe sends nothing: the registry is an unchecked collector, since
// its families appear as the SDK first uses them.
func (r *Registry) Describe(chan<- *prometheus.Desc) {}

// Collect sends every series, each family padded to one label set.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, f := range r.families {
		keySet := map[string]bool{}
		for _, s := range f.series {
			for k := range s.labels {
				keySet[k] = true
			}
		}
		keys := slices.Sorted(maps.Keys(keySet))
		help := r.help[name]
		if help == "" {
			help = "Temporal SDK metric " + name + "."
		}
		desc := prometheus.NewDesc(name, help, keys, nil)
		for _, s := range f.series {
			values := make([]string, len(keys))
			for i, k := range keys {
				values[i] = s.labels[k]
			}
			s.mu.Lock()
			var m prometheus.Metric
			var err error
			switch f.kind {
			case kindCounter:
				m, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, s.value, values...)
			case kindGauge:
				m, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, s.value, values...)
			case kindHistogram:
				cum := make(map[float64]uint64, len(Buckets))
				var acc uint64
				for i, b := range Buckets {
					acc += s.buckets[i]
					cum[b] = acc
				}
				m, err = prometheus.NewConstHistogram(desc, s.count, s.sum, cum, values...)
			}
			s.mu.Unlock()
			if err == nil {
				ch <- m
			}
		}
	}
}

// get returns the series of name with labels, creating it; nil when name
// is already a family of another kind (a programming error upstream that
// must not break the scrape).
func (r *Registry) get(name string, k kind, labels map[string]string) *series {
	key := canonical(labels)
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.families[name]
	if f == nil {
		f = &family{kind: k, series: map[string]*series{}}
		r.families[name] = f
	}
	if f.kind != k {
		return nil
	}
	s := f.series[key]
	if s == nil {
		s = &series{labels: labels}
		if k == kindHistogram {
			s.buckets = make([]uint64, len(Buckets)+1)
		}
		f.series[key] = s
	}
	return s
}

func canonical(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// handler is one tag set over a registry.
type handler struct {
	r    *Registry
	tags map[string]string
}

func (h handler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	maps.Copy(merged, h.tags)
	for k, v := range tags {
		merged[sanitize(k)] = v
	}
	return handler{r: h.r, tags: merged}
}

func (h handler) Counter(name string) client.MetricsCounter {
	s := h.r.get(sanitize(name), kindCounter, h.tags)
	return counter{s}
}

func (h handler) Gauge(name string) client.MetricsGauge {
	s := h.r.get(sanitize(name), kindGauge, h.tags)
	return gauge{s}
}

func (h handler) Timer(name string) client.MetricsTimer {
	s := h.r.get(sanitize(name)+"_seconds", kindHistogram, h.tags)
	return timer{s}
}

type counter struct{ s *series }

func (c counter) Inc(d int64) {
	if c.s == nil || d < 0 {
		return
	}
	c.s.mu.Lock()
	c.s.value += float64(d)
	c.s.mu.Unlock()
}

type gauge struct{ s *series }

func (g gauge) Update(v float64) {
	if g.s == nil {
		return
	}
	g.s.mu.Lock()
	g.s.value = v
	g.s.mu.Unlock()
}

type timer struct{ s *series }

func (t timer) Record(d time.Duration) {
	if t.s == nil {
		return
	}
	sec := d.Seconds()
	i, _ := slices.BinarySearch(Buckets, sec) // first bound >= sec: le is inclusive
	t.s.mu.Lock()
	t.s.buckets[i]++
	t.s.count++
	t.s.sum += sec
	t.s.mu.Unlock()
}

// sanitize maps a name onto Prometheus's [a-zA-Z_:][a-zA-Z0-9_:]*.
func sanitize(name string) string {
	b := []byte(name)
	for i, c := range b {
		ok := c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}
