//go:build cgo

package nvmlhost

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/retrain-ml/retrain/gpu"
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

func TestSamplerRuns(t *testing.T) {
	f := newDGX(t)
	series(f, 4, 0) // a GPU waiting on input
	h := f.open(t)
	idle := make(chan gpu.IdleWarning, 8)
	s, err := gpu.StartSampler(context.Background(), h, []string{f.dev(3).UUID, f.dev(4).UUID}, gpu.SamplerConfig{
		Interval:  time.Millisecond,
		IdleAfter: 5,
		OnIdle:    func(w gpu.IdleWarning) { idle <- w },
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

// Closing the host under a running sampler is not a crash: samples fail.
func TestSamplerOutlivesHost(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	s, err := gpu.StartSampler(context.Background(), h, []string{f.dev(0).UUID}, gpu.SamplerConfig{Interval: time.Millisecond})
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
