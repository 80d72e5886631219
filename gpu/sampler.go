package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// UtilizationReader reads the utilization of one GPU. *Host implements it.
type UtilizationReader interface {
	Utilization(uuid string) (Utilization, error)
}

// SamplerConfig configures a Sampler. Zero values take the defaults.
type SamplerConfig struct {
	// Interval between samples; default 1s.
	Interval time.Duration
	// IdleBelow: a sample is idle when GPU utilization is strictly below
	// this percentage; default 10.
	IdleBelow uint32
	// IdleAfter: a GPU sits idle when more than IdleAfter consecutive
	// samples are idle; default 30. Make it longer than the job's start-up
	// (loading data, compiling kernels), which is idle too. A negative
	// value turns idle detection off.
	IdleAfter int
	// OnIdle, if set, is called from the sampler's goroutine once per idle
	// stretch, when it crosses IdleAfter: for a log line or a heartbeat.
	OnIdle func(IdleWarning)
}

func (c SamplerConfig) withDefaults() SamplerConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.IdleBelow == 0 {
		c.IdleBelow = 10
	}
	if c.IdleAfter == 0 {
		c.IdleAfter = 30
	}
	return c
}

// IdleWarning says that a GPU sat idle while the job ran: in data-parallel
// training, typically every rank waiting on input or on the network.
type IdleWarning struct {
	UUID    string    `json:"uuid"`
	Since   time.Time `json:"since"`
	Samples int       `json:"samples"`
	Message string    `json:"message"`
}

// Summary is what a Sampler saw, in a form a train node can put in its
// outputs. Every figure is finite.
type Summary struct {
	IntervalSeconds float64 `json:"interval_s"`
	// Samples is the number of sampling rounds.
	Samples         int     `json:"samples"`
	DurationSeconds float64 `json:"duration_s"`
	// MeanUtilization and MaxUtilization are over every sample of every
	// GPU, in percent.
	MeanUtilization float64 `json:"mean_utilization"`
	MaxUtilization  uint32  `json:"max_utilization"`
	// IdleGPUs are the UUIDs of GPUs that sat idle at least once.
	IdleGPUs []string        `json:"idle_gpus"`
	Warnings []IdleWarning   `json:"warnings"`
	GPUs     []GPUUsage      `json:"gpus"`
	Config   SummaryCriteria `json:"idle_criteria"`
}

// SummaryCriteria records what counted as idle.
type SummaryCriteria struct {
	IdleBelow uint32 `json:"idle_below_percent"`
	IdleAfter int    `json:"idle_after_samples"`
}

// GPUUsage is one GPU's share of a Summary.
type GPUUsage struct {
	UUID                  string  `json:"uuid"`
	Samples               int     `json:"samples"`
	ReadErrors            int     `json:"read_errors"`
	MeanUtilization       float64 `json:"mean_utilization"`
	MaxUtilization        uint32  `json:"max_utilization"`
	MeanMemoryUtilization float64 `json:"mean_memory_utilization"`
	MaxMemoryUtilization  uint32  `json:"max_memory_utilization"`
	// IdleSamples counts idle samples; LongestIdle is the longest run of
	// them; IdleStretches counts runs longer than IdleAfter.
	IdleSamples   int    `json:"idle_samples"`
	LongestIdle   int    `json:"longest_idle_samples"`
	IdleStretches int    `json:"idle_stretches"`
	LastError     string `json:"last_error,omitempty"`
}

// Sampler samples the utilization of a job's GPUs until Stop.
type Sampler struct {
	r    UtilizationReader
	cfg  SamplerConfig
	quit chan struct{}
	done chan struct{}
	stop sync.Once

	mu       sync.Mutex
	start    time.Time
	last     time.Time
	rounds   int
	gpus     []*gpuTrack
	warnings []IdleWarning
}

type gpuTrack struct {
	usage            GPUUsage
	sumGPU, sumMem   float64
	run              int // current idle run, in samples
	runStart         time.Time
	warnedForThisRun bool
}

// StartSampler samples the GPUs named by uuids every cfg.Interval, the
// first time at once, until Stop or until ctx is done.
func StartSampler(ctx context.Context, r UtilizationReader, uuids []string, cfg SamplerConfig) (*Sampler, error) {
	if len(uuids) == 0 {
		return nil, errors.New("gpu: sampler: no GPUs to sample")
	}
	s := newSampler(r, uuids, cfg, time.Now())
	go s.loop(ctx)
	return s, nil
}

// newSampler builds a sampler without starting it, so tests can feed it
// samples at chosen times.
func newSampler(r UtilizationReader, uuids []string, cfg SamplerConfig, start time.Time) *Sampler {
	s := &Sampler{
		r:     r,
		cfg:   cfg.withDefaults(),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
		start: start,
		last:  start,
	}
	for _, u := range uuids {
		s.gpus = append(s.gpus, &gpuTrack{usage: GPUUsage{UUID: u}})
	}
	return s
}

func (s *Sampler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	s.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}

// sample takes one round of samples at time now.
func (s *Sampler) sample(now time.Time) {
	// Read outside the lock: NVML calls take time, Snapshot should not.
	type reading struct {
		u   Utilization
		err error
	}
	readings := make([]reading, len(s.gpus))
	for i, g := range s.gpus {
		readings[i].u, readings[i].err = s.r.Utilization(g.usage.UUID)
	}

	var warned []IdleWarning
	s.mu.Lock()
	s.rounds++
	s.last = now
	for i, g := range s.gpus {
		if w, ok := s.observe(g, readings[i].u, readings[i].err, now); ok {
			warned = append(warned, w)
		}
	}
	s.warnings = append(s.warnings, warned...)
	s.mu.Unlock()

	if s.cfg.OnIdle != nil {
		for _, w := range warned {
			s.cfg.OnIdle(w)
		}
	}
}

// observe adds one sample of one GPU and reports a new idle warning.
func (s *Sampler) observe(g *gpuTrack, u Utilization, err error, now time.Time) (IdleWarning, bool) {
	if err != nil {
		// An unreadable sample neither ends nor extends an idle run.
		g.usage.ReadErrors++
		g.usage.LastError = err.Error()
		return IdleWarning{}, false
	}
	g.usage.Samples++
	g.sumGPU += float64(u.GPU)
	g.sumMem += float64(u.Memory)
	g.usage.MaxUtilization = max(g.usage.MaxUtilization, u.GPU)
	g.usage.MaxMemoryUtilization = max(g.usage.MaxMemoryUtilization, u.Memory)
	if u.GPU >= s.cfg.IdleBelow {
		g.run, g.warnedForThisRun = 0, false
		return IdleWarning{}, false
	}
	g.usage.IdleSamples++
	if g.run == 0 {
		g.runStart = now
	}
	g.run++
	g.usage.LongestIdle = max(g.usage.LongestIdle, g.run)
	if s.cfg.IdleAfter < 0 || g.run <= s.cfg.IdleAfter || g.warnedForThisRun {
		return IdleWarning{}, false
	}
	g.warnedForThisRun = true
	g.usage.IdleStretches++
	return IdleWarning{
		UUID:    g.usage.UUID,
		Since:   g.runStart,
		Samples: g.run,
		Message: fmt.Sprintf("GPU %s below %d%% utilization for %d consecutive samples (%s) while the job runs: it may be waiting on input or the network",
			g.usage.UUID, s.cfg.IdleBelow, g.run, time.Duration(g.run)*s.cfg.Interval),
	}, true
}

// Snapshot returns the summary so far, without stopping.
func (s *Sampler) Snapshot() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := Summary{
		IntervalSeconds: s.cfg.Interval.Seconds(),
		Samples:         s.rounds,
		DurationSeconds: s.last.Sub(s.start).Seconds(),
		IdleGPUs:        []string{},
		Warnings:        append([]IdleWarning{}, s.warnings...),
		GPUs:            make([]GPUUsage, 0, len(s.gpus)),
		Config:          SummaryCriteria{IdleBelow: s.cfg.IdleBelow, IdleAfter: s.cfg.IdleAfter},
	}
	var total float64
	var n int
	for _, g := range s.gpus {
		u := g.usage
		if u.Samples > 0 {
			u.MeanUtilization = g.sumGPU / float64(u.Samples)
			u.MeanMemoryUtilization = g.sumMem / float64(u.Samples)
		}
		total += g.sumGPU
		n += u.Samples
		sum.MaxUtilization = max(sum.MaxUtilization, u.MaxUtilization)
		if u.IdleStretches > 0 {
			sum.IdleGPUs = append(sum.IdleGPUs, u.UUID)
		}
		sum.GPUs = append(sum.GPUs, u)
	}
	if n > 0 {
		sum.MeanUtilization = total / float64(n)
	}
	return sum
}

// Stop ends sampling and returns the summary. It may be called more than
// once.
func (s *Sampler) Stop() Summary {
	s.stop.Do(func() { close(s.quit) })
	<-s.done
	return s.Snapshot()
}
