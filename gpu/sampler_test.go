package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeReader replays readings per UUID; an error reading is a failed read.
type fakeReader map[string][]reading

type reading struct {
	u   Utilization
	err error
}

func (f fakeReader) Utilization(uuid string) (Utilization, error) {
	rs := f[uuid]
	if len(rs) == 0 {
		return Utilization{}, errors.New("no more readings")
	}
	r := rs[0]
	f[uuid] = rs[1:]
	return r.u, r.err
}

func TestSamplerReadErrorsDoNotBreakIdleRuns(t *testing.T) {
	lost := errors.New("GPU is lost")
	idle := reading{u: Utilization{GPU: 1}}
	r := fakeReader{"GPU-a": {idle, idle, {err: lost}, idle, {err: lost}, {u: Utilization{GPU: 50}}}}
	t0 := time.Unix(0, 0)
	s := newSampler(r, []string{"GPU-a"}, SamplerConfig{IdleAfter: 2}, t0)
	for i := range 6 {
		s.sample(t0.Add(time.Duration(i) * time.Second))
	}
	sum := s.Snapshot()
	g := sum.GPUs[0]
	if g.Samples != 4 || g.ReadErrors != 2 || g.LastError != "GPU is lost" || g.LongestIdle != 3 || g.IdleStretches != 1 {
		t.Errorf("usage: %+v", g)
	}
	if g.MeanUtilization != 53.0/4 {
		t.Errorf("mean %v", g.MeanUtilization)
	}
}

func TestSamplerDefaults(t *testing.T) {
	c := SamplerConfig{}.withDefaults()
	if c.Interval != time.Second || c.IdleBelow != 10 || c.IdleAfter != 30 {
		t.Errorf("defaults: %+v", c)
	}
	// Idle detection off.
	r := fakeReader{"GPU-a": make([]reading, 100)}
	s := newSampler(r, []string{"GPU-a"}, SamplerConfig{IdleAfter: -1}, time.Unix(0, 0))
	for range 100 {
		s.sample(time.Unix(0, 0))
	}
	if sum := s.Snapshot(); sum.GPUs[0].IdleSamples != 100 || len(sum.Warnings) != 0 || len(sum.IdleGPUs) != 0 {
		t.Errorf("with detection off: %+v", sum)
	}
	// Zero samples: every figure is still finite.
	if sum := newSampler(r, []string{"GPU-a"}, SamplerConfig{}, time.Unix(0, 0)).Snapshot(); sum.MeanUtilization != 0 || sum.GPUs[0].MeanUtilization != 0 {
		t.Errorf("empty summary: %+v", sum)
	}
	if _, err := StartSampler(context.Background(), r, nil, SamplerConfig{}); err == nil {
		t.Error("sampler of no GPUs started")
	}
}

// seriesReader reports, per UUID, one GPU utilization per read (memory
// utilization half of it), then the last one forever.
type seriesReader map[string][]uint32

func (r seriesReader) Utilization(uuid string) (Utilization, error) {
	vs, ok := r[uuid]
	if !ok || len(vs) == 0 {
		return Utilization{}, fmt.Errorf("no GPU %s", uuid)
	}
	v := vs[0]
	if len(vs) > 1 {
		r[uuid] = vs[1:]
	}
	return Utilization{GPU: v, Memory: v / 2}, nil
}

func TestSamplerIdleDetection(t *testing.T) {
	uuids := []string{"GPU-0", "GPU-1"}
	h := seriesReader{
		//          busy  idle x4 (> 3)  busy idle x6 (> 3)     busy  idle x3 (not > 3) busy
		uuids[0]: {95, 95, 5, 5, 5, 5, 95, 3, 3, 3, 3, 3, 3, 90, 0, 9, 9, 10},
		// The threshold is strict: exactly 10% is not idle.
		uuids[1]: {10},
	}

	var warned []IdleWarning
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	s := newSampler(h, uuids, SamplerConfig{
		Interval:  time.Second,
		IdleBelow: 10,
		IdleAfter: 3,
		OnIdle:    func(w IdleWarning) { warned = append(warned, w) },
	}, t0)
	const rounds = 18
	for i := range rounds {
		s.sample(t0.Add(time.Duration(i) * time.Second))
	}
	sum := s.Snapshot()

	if sum.Samples != rounds || sum.DurationSeconds != rounds-1 || sum.IntervalSeconds != 1 {
		t.Errorf("rounds: %+v", sum)
	}
	g0, g1 := sum.GPUs[0], sum.GPUs[1]
	if g0.IdleStretches != 2 || g0.LongestIdle != 6 || g0.IdleSamples != 4+6+3 || g0.Samples != rounds {
		t.Errorf("GPU 0: %+v", g0)
	}
	wantMean := float64(95+95+5*4+95+3*6+90+0+9+9+10) / rounds
	if math.Abs(g0.MeanUtilization-wantMean) > 1e-9 || g0.MaxUtilization != 95 || g0.MaxMemoryUtilization != 47 {
		t.Errorf("GPU 0 figures: %+v, want mean %v", g0, wantMean)
	}
	if g1.IdleSamples != 0 || g1.IdleStretches != 0 || g1.MeanUtilization != 10 {
		t.Errorf("GPU 1: %+v", g1)
	}
	if !slices.Equal(sum.IdleGPUs, []string{uuids[0]}) {
		t.Errorf("idle GPUs %v", sum.IdleGPUs)
	}
	if sum.MaxUtilization != 95 || math.Abs(sum.MeanUtilization-(wantMean*rounds+10*rounds)/(2*rounds)) > 1e-9 {
		t.Errorf("host figures: mean %v max %v", sum.MeanUtilization, sum.MaxUtilization)
	}

	// One warning per stretch, when it crosses IdleAfter, dated from the
	// stretch's first idle sample.
	if len(warned) != 2 || !slices.Equal(sum.Warnings, warned) {
		t.Fatalf("warnings: %+v (callback %+v)", sum.Warnings, warned)
	}
	if w := warned[0]; w.UUID != uuids[0] || !w.Since.Equal(t0.Add(2*time.Second)) || w.Samples != 4 ||
		!strings.Contains(w.Message, "below 10% utilization for 4 consecutive samples (4s)") || !strings.Contains(w.Message, "waiting on input or the network") {
		t.Errorf("first warning: %+v", w)
	}
	if w := warned[1]; !w.Since.Equal(t0.Add(7*time.Second)) || w.Samples != 4 {
		t.Errorf("second warning: %+v", w)
	}
	if _, err := json.Marshal(sum); err != nil {
		t.Errorf("summary does not encode: %v", err)
	}
}

func TestSamplerStopsWithContext(t *testing.T) {
	h := seriesReader{"GPU-0": {90}}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := StartSampler(ctx, h, []string{"GPU-0"}, SamplerConfig{Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-s.done
	n := s.Snapshot().Samples
	time.Sleep(10 * time.Millisecond)
	if sum := s.Stop(); sum.Samples != n || n < 1 {
		t.Errorf("samples %d then %d", n, sum.Samples)
	}
}
