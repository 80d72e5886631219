// Package bench measures the Pipeline interpreter against its floor: the
// same DAG shapes written as plain Temporal SDK workflows with trivial
// activities, run on the same server and worker process, in one run, so the
// ratios are what the engine adds and nothing else.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/runs"
)

// PlainQueue is the task queue of the plain SDK baseline workflows.
const PlainQueue = "retrain-bench-plain"

// Config sets the shapes and how often each is measured.
type Config struct {
	Chain     int // nodes in the sequential chain (default 100)
	FanOut    int // parallel nodes in the fan-out (default 1000)
	Rounds    int // measured runs per shape; the median is reported (default 3)
	TaskQueue string
}

func (c *Config) defaults() {
	if c.Chain <= 0 {
		c.Chain = 100
	}
	if c.FanOut <= 0 {
		c.FanOut = 1000
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.TaskQueue == "" {
		c.TaskQueue = runs.DefaultTaskQueue
	}
}

// Report holds the medians.
type Report struct {
	Config       Config
	PlainStep    time.Duration // plain SDK chain, per step
	EngineStep   time.Duration // Pipeline chain of noop nodes, per step
	PlainFanOut  time.Duration // plain SDK fan-out, wall time
	EngineFanOut time.Duration // Pipeline fan-out of noop nodes, wall time
}

// ChainRatio is engine/plain per step.
func (r Report) ChainRatio() float64 { return ratio(r.EngineStep, r.PlainStep) }

// FanOutRatio is engine/plain wall time.
func (r Report) FanOutRatio() float64 { return ratio(r.EngineFanOut, r.PlainFanOut) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Print writes the report as a table with the targets next to the figures.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%-34s %12s %12s %8s %8s\n", "shape", "plain SDK", "retrain", "ratio", "target")
	fmt.Fprintf(w, "%-34s %12s %12s %7.2fx %8s\n", fmt.Sprintf("chain of %d, per step", r.Config.Chain),
		ms(r.PlainStep), ms(r.EngineStep), r.ChainRatio(), "<=1.3x")
	fmt.Fprintf(w, "%-34s %12s %12s %7.2fx %8s\n", fmt.Sprintf("fan-out of %d, wall", r.Config.FanOut),
		ms(r.PlainFanOut), ms(r.EngineFanOut), r.FanOutRatio(), "<=1.5x")
	fmt.Fprintf(w, "plain step on this server: %s (target <= 8 ms); medians of %d rounds\n", ms(r.PlainStep), r.Config.Rounds)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// RegisterPlain registers the baseline workflows and activity on w, which
// must poll PlainQueue.
func RegisterPlain(w sdkworker.Worker) {
	w.RegisterWorkflowWithOptions(PlainChain, workflow.RegisterOptions{Name: "BenchPlainChain"})
	w.RegisterWorkflowWithOptions(PlainFanOut, workflow.RegisterOptions{Name: "BenchPlainFanOut"})
	w.RegisterActivityWithOptions(Trivial, activity.RegisterOptions{Name: "BenchTrivial"})
}

// Trivial is the baseline activity: it returns at once.
func Trivial(context.Context, int) (int, error) { return 0, nil }

var plainOpts = workflow.ActivityOptions{StartToCloseTimeout: time.Minute}

// PlainChain runs n trivial activities one after another.
func PlainChain(ctx workflow.Context, n int) error {
	ctx = workflow.WithActivityOptions(ctx, plainOpts)
	for i := range n {
		if err := workflow.ExecuteActivity(ctx, "BenchTrivial", i).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// PlainFanOut runs n trivial activities at once and waits for all.
func PlainFanOut(ctx workflow.Context, n int) error {
	ctx = workflow.WithActivityOptions(ctx, plainOpts)
	futures := make([]workflow.Future, n)
	for i := range n {
		futures[i] = workflow.ExecuteActivity(ctx, "BenchTrivial", i)
	}
	for _, f := range futures {
		if err := f.Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// ChainSpec is a pipeline of n noop nodes, each needing the one before.
func ChainSpec(n int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: bench-chain\nparallelism: 1\nnodes:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {id: n%d, type: noop", i)
		if i > 0 {
			fmt.Fprintf(&b, ", needs: [n%d]", i-1)
		}
		b.WriteString("}\n")
	}
	return []byte(b.String())
}

// FanOutSpec is a pipeline of n independent noop nodes.
func FanOutSpec(n int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: bench-fanout\nparallelism: %d\nnodes:\n", n)
	for i := range n {
		fmt.Fprintf(&b, "  - {id: n%d, type: noop}\n", i)
	}
	return []byte(b.String())
}

// Run measures every shape cfg.Rounds times after one warm-up each,
// alternating engine and plain runs so drift on a noisy machine hits both.
func Run(ctx context.Context, c client.Client, cfg Config) (Report, error) {
	cfg.defaults()
	rep := Report{Config: cfg}
	type shape struct {
		out  *time.Duration
		per  int
		exec func() error
	}
	shapes := []shape{
		{&rep.PlainStep, cfg.Chain, func() error { return runPlain(ctx, c, "BenchPlainChain", cfg.Chain) }},
		{&rep.EngineStep, cfg.Chain, func() error { return runEngine(ctx, c, cfg, ChainSpec(cfg.Chain)) }},
		{&rep.PlainFanOut, 1, func() error { return runPlain(ctx, c, "BenchPlainFanOut", cfg.FanOut) }},
		{&rep.EngineFanOut, 1, func() error { return runEngine(ctx, c, cfg, FanOutSpec(cfg.FanOut)) }},
	}
	samples := make([][]time.Duration, len(shapes))
	for round := -1; round < cfg.Rounds; round++ { // round -1 warms up
		for i, s := range shapes {
			start := time.Now()
			if err := s.exec(); err != nil {
				return rep, err
			}
			if round >= 0 {
				samples[i] = append(samples[i], time.Since(start)/time.Duration(s.per))
			}
		}
	}
	for i, s := range shapes {
		*s.out = median(samples[i])
	}
	return rep, nil
}

func runPlain(ctx context.Context, c client.Client, wf string, n int) error {
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: PlainQueue}, wf, n)
	if err != nil {
		return err
	}
	return run.Get(ctx, nil)
}

func runEngine(ctx context.Context, c client.Client, cfg Config, spec []byte) error {
	run, err := runs.Start(ctx, c, runs.Request{Spec: spec, SpecFile: "bench.yaml", TaskQueue: cfg.TaskQueue})
	if err != nil {
		return err
	}
	if err := c.GetWorkflow(ctx, run.ID, run.RunID).Get(ctx, nil); err != nil {
		return fmt.Errorf("bench run %s: %w", run.ID, err)
	}
	return nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
