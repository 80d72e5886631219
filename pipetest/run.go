package pipetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/readiness"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
	"github.com/retrain-ml/retrain/workflows"
)

// Options are the policy the cases run under, as a worker's flags set
// it: the programs run: true commands may start and what they see.
type Options struct {
	// Logger gets the nodes' and the workflows' logs; nil discards them.
	Logger *slog.Logger
	// AllowCommands are the programs command nodes that run may start
	// (a worker's --allow-commands); empty allows any.
	AllowCommands []string
	// Env is what those programs see (a worker's --pass-env, --secrets-dir
	// and --allow-paths).
	Env progenv.Policy
	// WallTimeout bounds one case's wall-clock time (a real command that
	// hangs); 0 means DefaultWallTimeout.
	WallTimeout time.Duration
	// NodeTypes are a team's own node types, as its worker binary
	// registers them (worker.WithNodeTypes): their nodes are stubbed.
	NodeTypes []nodetype.Type
}

// DefaultWallTimeout is a case's wall-clock limit.
const DefaultWallTimeout = time.Minute

// Runner runs suites: the node types, built once, under one policy.
type Runner struct {
	opts  Options
	types []nodetype.Type
	reg   *dags.Registry
}

// NewRunner builds the built-in node types under opts' policy, as a
// worker without an object store, a lake or GPUs would.
func NewRunner(opts Options) (*Runner, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.WallTimeout <= 0 {
		opts.WallTimeout = DefaultWallTimeout
	}
	if _, err := worker.Registry(opts.NodeTypes...); err != nil {
		return nil, err // a custom type that a worker would refuse
	}
	types := append(worker.OfflineTypes(opts.Logger, opts.AllowCommands, opts.Env), opts.NodeTypes...)
	nts := make([]dags.NodeType, len(types))
	for i, t := range types {
		nts[i] = t.NodeType
	}
	reg, err := dags.NewRegistry(nts...)
	if err != nil {
		return nil, err
	}
	return &Runner{opts: opts, types: types, reg: reg}, nil
}

// Registry is the node types the runner validates pipelines against.
func (r *Runner) Registry() *dags.Registry { return r.reg }

// CaseResult is how one case went.
type CaseResult struct {
	File     string
	Pipeline string
	Case     string
	Pos      dags.Pos
	Passed   bool
	Wall     time.Duration // the case's wall-clock time
	RunTime  time.Duration // the run's time, skipped ahead
	Failures []string      // what did not match, or went wrong
	Table    []StateRow    // expected and actual node states
	Result   *runs.Result
}

// Run runs every case of a suite.
func (r *Runner) Run(ctx context.Context, s *Suite) []CaseResult {
	var out []CaseResult
	for _, c := range s.File.Cases {
		if ctx.Err() != nil {
			break
		}
		out = append(out, r.runCase(s, c))
	}
	return out
}

// deadlockTimeout bounds one workflow task of a case.
const deadlockTimeout = 10 * time.Second

// runID is the test run's workflow id: what ${run.id} reads.
const runID = "retrain-test"

func (r *Runner) runCase(s *Suite, c *Case) (res CaseResult) {
	started := time.Now()
	res = CaseResult{File: s.File.Path, Pipeline: s.Spec.Name, Case: c.Name, Pos: c.Pos}
	defer func() { res.Wall = time.Since(started) }()

	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(sdklog.NewStructuredLogger(r.opts.Logger))
	env := ts.NewTestWorkflowEnvironment()
	env.SetTestTimeout(r.opts.WallTimeout)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: runID})
	// A workflow task that runs this long is stuck; the SDK's 1 s is
	// too tight for a laptop busy building.
	env.SetWorkerOptions(sdkworker.Options{DeadlockDetectionTimeout: deadlockTimeout})
	h := newCaseRun(c, env)

	// The worker's policy: runs name a pipeline of its folder (the test
	// file's), and inline specs are refused, as a worker started with
	// --pipelines DIR has it; the node types are built with its allowed
	// programs and environment (NewRunner).
	resolver := &workflows.Resolver{Library: dags.NewLibrary(os.DirFS(s.Dir)), Registry: r.reg, Worker: "retrain-test"}
	workflows.Register(env)
	env.RegisterActivityWithOptions(resolver.Resolve, activity.RegisterOptions{Name: runs.ResolveActivity})
	reg := func(name string, fn any) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	// A case never reads or writes the node cache: every node marked
	// cache: runs its stub, and says why.
	reg(nodetype.CacheLookupActivity, func(context.Context, nodetype.CacheLookup) (nodetype.CacheLookupResult, error) {
		return nodetype.CacheLookupResult{Reason: "retrain test never reads the node cache"}, nil
	})
	reg(nodetype.CacheStoreActivity, func(context.Context, nodetype.CacheStore) error { return nil })
	// A case checks the pipeline's logic with its nodes stubbed: its
	// wait_for conditions hold at once, and nothing reads the lake, files
	// or programs for them.
	reg(runs.ReadinessActivity, func(_ context.Context, in runs.ReadinessCheck) (readiness.Observation, error) {
		return readiness.Observation{Ready: true, Saw: "retrain test takes " + in.Condition.Name() + " as ready"}, nil
	})
	for _, t := range r.types {
		if t.NodeType.Kind == dags.KindWorkflow {
			real, _ := t.Workflow.(nodeWorkflow)
			env.RegisterWorkflowWithOptions(h.childFunc(t, real), workflow.RegisterOptions{Name: t.TargetName()})
			switch t.NodeType.Name {
			case canarynode.Name:
				h.registerCanary(reg)
			case "gate":
				// A gate that runs reads a registry baseline as a worker
				// without an object store does: it fails, as bad input.
				for name, fn := range t.Activities {
					reg(name, fn)
				}
			}
			continue
		}
		reg(t.TargetName(), nodetype.Activity(h.activityFunc(t)))
		for name := range t.Workflows {
			// A node spread over hosts (a train gang) runs as this
			// workflow: answered by the node's stub.
			env.RegisterWorkflowWithOptions(h.childFunc(t, nil), workflow.RegisterOptions{Name: name})
		}
	}

	in := runs.PipelineInput{Pipeline: s.Spec.Name, Params: c.Params, LogicalDate: c.LogicalDate, Schedule: c.Schedule}
	for _, sc := range s.Spec.Schedules {
		if sc.ID == c.Schedule {
			in.Timezone = sc.Timezone
		}
	}
	timedOut := ""
	env.RegisterDelayedCallback(func() {
		timedOut = fmt.Sprintf("the run took longer than the case's timeout of %s: %s", c.Timeout, h.waitingOn())
		env.CancelWorkflow()
	}, c.Timeout)
	start := env.Now()
	if msg := execute(env, in); msg != "" {
		res.Failures = append(res.Failures, fmt.Sprintf("the case ran longer than %s of wall-clock time: %s (%s)", r.opts.WallTimeout, h.waitingOn(), msg))
		h.stop()
		return res
	}
	res.RunTime = env.Now().Sub(start)
	if !env.IsWorkflowCompleted() {
		res.Failures = append(res.Failures, "the run did not complete: "+h.waitingOn())
		return res
	}
	run, err := result(env)
	if err != nil {
		res.Failures = append(res.Failures, err.Error())
		return res
	}
	res.Result = run
	if timedOut != "" {
		h.problem("%s", timedOut)
	}
	h.unfired()
	res.Failures, res.Table = compare(c, run, h)
	res.Passed = len(res.Failures) == 0
	return res
}

// execute runs the workflow, turning the test environment's panic on its
// wall-clock limit into a message.
func execute(env *testsuite.TestWorkflowEnvironment, in runs.PipelineInput) (msg string) {
	defer func() {
		if p := recover(); p != nil {
			msg, _, _ = strings.Cut(fmt.Sprint(p), ", workflow stack") // the stack is the interpreter's, not the pipeline's
			if len(msg) > 300 {
				msg = msg[:300] + "..."
			}
		}
	}()
	env.ExecuteWorkflow(runs.PipelineWorkflow, in)
	return ""
}

// result is the run's result, from its return value or its error.
func result(env *testsuite.TestWorkflowEnvironment) (*runs.Result, error) {
	err := env.GetWorkflowError()
	if err == nil {
		var res runs.Result
		if err := env.GetWorkflowResult(&res); err != nil {
			return nil, fmt.Errorf("read the run's result: %w", err)
		}
		return &res, nil
	}
	if res, ok := runs.ResultFromError(err); ok {
		return res, nil
	}
	if res, ok := runs.ResultFromCancel(err); ok {
		return res, nil
	}
	return nil, fmt.Errorf("the run ended without a result: %w", err)
}
