package gpu

import (
	"context"
	"errors"
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
