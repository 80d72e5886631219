package trainer

import (
	"context"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// limitSource ends after a number of batches from its last Seek, so that
// Run trains a fixed number of steps per call.
type limitSource struct {
	Source
	batches, left int
}

func (s *limitSource) Next(ctx context.Context, dst []Example) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	s.left--
	n, err := s.Source.Next(ctx, dst)
	if err == nil && s.left == 0 {
		err = io.EOF
	}
	return n, err
}

func (s *limitSource) Seek(ctx context.Context, pos Position) error {
	s.left = s.batches
	return s.Source.Seek(ctx, pos)
}

// BenchmarkTrain measures training throughput with 1 and 2 synchronous
// workers, interleaved so both see the same load on the machine, and their
// ratio (speedup_2w). Each op is 20 steps of 1024 examples with each worker
// count; both train the same weights (the result does not depend on
// workers).
//
// On a machine shared with other work, two goroutines may not get two cores.
// cpu_2w puts the speedup in context: the speedup of an embarrassingly
// parallel floating-point loop on 2 goroutines over 1, measured in between,
// the most any code could have got at that time. work_2w is the CPU time per
// example with 2 workers over that with 1 (on Unix): the cost of the
// synchronization, which load on the machine does not hide; 2/work_2w is
// the speedup to expect on 2 idle cores, less load imbalance.
func BenchmarkTrain(b *testing.B) {
	exs, _ := newSynth(1, 100_000, 2_000).sample(2, 200_000)
	const steps = 20
	var trainers [2]*Trainer
	var sources [2]*limitSource
	var elapsed, spun, cpu [2]time.Duration
	var examples [2]int64
	for i := range trainers {
		cfg := Config{
			Model:     ModelConfig{Dense: synthSchema.Dense, Sparse: synthSchema.Sparse, Dim: 8},
			Workers:   i + 1,
			BatchSize: 1024,
		}
		tr, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		trainers[i] = tr
		sources[i] = &limitSource{Source: NewMemorySource(exs, 1, 0), batches: steps}
		if _, err := tr.Run(context.Background(), sources[i], nil, nil); err != nil { // warm up the buffers
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i, tr := range trainers {
			start, cpu0 := time.Now(), cpuTime()
			res, err := tr.Run(context.Background(), sources[i], nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			elapsed[i] += time.Since(start)
			cpu[i] += cpuTime() - cpu0
			examples[i] += res.Examples
			spun[i] += spin(i + 1)
		}
	}
	w1 := float64(examples[0]) / elapsed[0].Seconds()
	w2 := float64(examples[1]) / elapsed[1].Seconds()
	b.ReportMetric(w1, "ex/s_1w")
	b.ReportMetric(w2, "ex/s_2w")
	b.ReportMetric(w2/w1, "speedup_2w")
	b.ReportMetric(2*spun[0].Seconds()/spun[1].Seconds(), "cpu_2w")
	if cpu[0] > 0 {
		b.ReportMetric(cpu[1].Seconds()/float64(examples[1])/(cpu[0].Seconds()/float64(examples[0])), "work_2w")
	}
}

// spin runs a fixed amount of floating-point work on each of n goroutines
// and returns how long it took.
func spin(n int) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			x := 1.0
			for range 5_000_000 {
				x = x*1.0000001 + 1e-9
			}
			sink.Store(math.Float64bits(x))
		})
	}
	wg.Wait()
	return time.Since(start)
}

var sink atomic.Uint64
