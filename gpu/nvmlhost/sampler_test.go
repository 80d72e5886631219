//go:build cgo

package gpu

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// series makes a device report the given GPU utilization, one value per
// call, then the last one forever.
func series(f *dgx, i int, values ...uint32) {
	n := 0
	f.dev(i).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		v := values[min(n, len(values)-1)]
		n++
		return nvml.Utilization{Gpu: v, Memory: v / 2}, nvml.SUCCESS
	}
}

func TestSamplerIdleDetection(t *testing.T) {
	f := newDGX(t)
	//            busy  idle x4 (> 3)  busy idle x6 (> 3)     busy  idle x3 (not > 3) busy
	series(f, 0, 95, 95, 5, 5, 5, 5, 95, 3, 3, 3, 3, 3, 3, 90, 0, 9, 9, 10)
	// The threshold is strict: exactly 10% is not idle.
	series(f, 1, 10)
	h := f.open(t)

	var warned []IdleWarning
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	uuids := []string{f.dev(0).UUID, f.dev(1).UUID}
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

func TestSamplerRuns(t *testing.T) {
	f := newDGX(t)
	series(f, 4, 0) // a GPU waiting on input
	h := f.open(t)
	idle := make(chan IdleWarning, 8)
	s, err := StartSampler(context.Background(), h, []string{f.dev(3).UUID, f.dev(4).UUID}, SamplerConfig{
		Interval:  time.Millisecond,
		IdleAfter: 5,
		OnIdle:    func(w IdleWarning) { idle <- w },
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-idle:
		if w.UUID != f.dev(4).UUID {
			t.Errorf("warning for %s", w.UUID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no idle warning")
	}
	live := s.Snapshot()
	sum := s.Stop()
	if again := s.Stop(); again.Samples != sum.Samples {
		t.Error("second Stop sampled more")
	}
	if sum.Samples < 6 || sum.Samples < live.Samples || sum.GPUs[0].MeanUtilization != 90 || len(sum.Warnings) != 1 || sum.Config.IdleBelow != 10 {
		t.Errorf("summary: %+v", sum)
	}
	if !slices.Equal(sum.IdleGPUs, []string{f.dev(4).UUID}) {
		t.Errorf("idle GPUs: %v", sum.IdleGPUs)
	}
}

func TestSamplerStopsWithContext(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := StartSampler(ctx, h, []string{f.dev(0).UUID}, SamplerConfig{Interval: time.Millisecond})
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

// Closing the host under a running sampler is not a crash: samples fail.
func TestSamplerOutlivesHost(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	s, err := StartSampler(context.Background(), h, []string{f.dev(0).UUID}, SamplerConfig{Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sample", func() bool { return s.Snapshot().Samples > 0 })
	h.Close()
	waitFor(t, "a failed sample", func() bool { return s.Snapshot().GPUs[0].ReadErrors > 0 })
	if sum := s.Stop(); !strings.Contains(sum.GPUs[0].LastError, "closed") {
		t.Errorf("last error %q", sum.GPUs[0].LastError)
	}
}
