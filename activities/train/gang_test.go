package train

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/nodetype"
)

// fakeHosts stands in for the gang's activities: the hosts the queue
// lists, what each one's run does on each attempt, and what was leased
// and released.
type fakeHosts struct {
	mu       sync.Mutex
	live     []string
	run      func(ctx context.Context, in RunInput) (HostResult, error)
	leased   map[string]int // by host, how many leases
	released map[string]int
	leases   []LeaseInput            // what each lease asked, in order
	refuse   func(host string) error // a host's answer to a lease instead of joining; nil: all join
}

func (f *fakeHosts) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterWorkflowWithOptions(Gang, workflowOpts(GangWorkflow))
	env.RegisterActivityWithOptions(func(context.Context, string) ([]string, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.live, nil
	}, activity.RegisterOptions{Name: GangHostsActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in LeaseInput) (gang.Member, error) {
		q := activity.GetInfo(ctx).TaskQueue
		host := q[strings.LastIndex(q, "/")+1:]
		f.mu.Lock()
		defer f.mu.Unlock()
		f.leases = append(f.leases, in)
		if f.refuse != nil {
			if err := f.refuse(host); err != nil {
				return gang.Member{}, err
			}
		}
		f.leased[host]++
		return gang.Member{Host: host, Address: "10.0.0." + host[1:], Port: 29500}, nil
	}, activity.RegisterOptions{Name: GangLeaseActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, key string) error {
		q := activity.GetInfo(ctx).TaskQueue
		f.mu.Lock()
		defer f.mu.Unlock()
		f.released[q[strings.LastIndex(q, "/")+1:]]++
		return nil
	}, activity.RegisterOptions{Name: GangReleaseActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in RunInput) (HostResult, error) {
		return f.run(ctx, in)
	}, activity.RegisterOptions{Name: GangRunActivity})
}

func gangInput(hosts int, extra map[string]any) nodetype.Input {
	with := map[string]any{"data": "s3://b/split", "trainer": "command", "argv": []any{"python3", "train.py"}, "hosts": float64(hosts), "gang_timeout": "20s"}
	for k, v := range extra {
		with[k] = v
	}
	return nodetype.Input{Pipeline: "p", RunID: "r", Node: "train", Type: "train", With: with, Options: &nodetype.Options{
		Timeout: time.Hour, Heartbeat: 30 * time.Second, Queue: "q",
		Retry: dags.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second, Backoff: 2, MaxInterval: time.Minute},
	}}
}

func newFakeHosts(live ...string) *fakeHosts {
	return &fakeHosts{live: live, leased: map[string]int{}, released: map[string]int{}}
}

func TestGangFormsAndReports(t *testing.T) {
	env := newGangTestEnv()
	f := newFakeHosts("h1", "h2", "h3")
	f.run = func(ctx context.Context, in RunInput) (HostResult, error) {
		if len(in.Members) != 2 || in.Processes != 1 {
			t.Errorf("run input %+v", in)
		}
		res := HostResult{Ranks: []gang.RankProgress{{Rank: in.Host, Step: 100, StepsPerSec: 10, Seconds: 10}}}
		if in.Host == 0 {
			res.Outputs = &Outputs{Trainer: CommandTrainer, Steps: 100, Summary: "trained 100 steps"}
		}
		return res, nil
	}
	f.register(env)
	env.ExecuteWorkflow(Gang, gangInput(2, nil))
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	hosts, _ := res.Outputs["hosts"].([]any)
	if len(hosts) != 2 || res.Outputs["steps"] != 100.0 || res.Attempt != 1 {
		t.Fatalf("outputs %v, attempt %d", res.Outputs, res.Attempt)
	}
	if s := res.Outputs["summary"].(string); !strings.Contains(s, "2 hosts: h1 10.0 steps/s, h2 10.0 steps/s") {
		t.Errorf("summary %q", s)
	}
	if len(f.released) != 0 || f.leased["h3"] != 0 {
		t.Errorf("leased %v, released %v: want h1 and h2 leased, nothing released", f.leased, f.released)
	}
}

func TestGangTimesOutAndReleases(t *testing.T) {
	env := newGangTestEnv()
	f := newFakeHosts("solo")
	f.run = func(context.Context, RunInput) (HostResult, error) {
		t.Error("a rank ran though the gang never formed")
		return HostResult{}, nil
	}
	f.register(env)
	in := gangInput(2, nil)
	in.Options.Retry.MaxAttempts = 1
	env.ExecuteWorkflow(Gang, in)
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !asApp(err, &appErr) || appErr.Type() != errtype.GangIncomplete || !strings.Contains(err.Error(), "1 of 2 hosts joined") {
		t.Fatalf("error %v", err)
	}
	if f.leased["solo"] != 1 || f.released["solo"] != 1 {
		t.Errorf("leased %v, released %v: want solo's lease released", f.leased, f.released)
	}
}

func TestGangRetriesWithANewGang(t *testing.T) {
	env := newGangTestEnv()
	f := newFakeHosts("h1", "h2")
	f.run = func(ctx context.Context, in RunInput) (HostResult, error) {
		// The gang's key ends with its attempt. Counting calls instead
		// would miscount: the SDK's test environment resolves a host
		// cancelled before its activity started as cancelled and may
		// never run it (or run it late, with a context never cancelled).
		first := strings.HasSuffix(in.Key, "/1")
		if first && in.Host == 1 {
			return HostResult{}, temporal.NewApplicationError("host 1 of 2 (h2): rank 1 of 2 exited with code 7", errtype.RankFailed)
		}
		if first {
			// Stopped by the gang when host 1 failed; a run whose
			// cancellation the test environment lost gives up on its own,
			// as its ranks would once their peer is gone.
			select {
			case <-ctx.Done():
				return HostResult{}, ctx.Err()
			case <-time.After(2 * time.Second):
				return HostResult{}, errors.New("host 0 of 2 (h1): the peer on host 1 is gone")
			}
		}
		res := HostResult{}
		if in.Host == 0 {
			res.Outputs = &Outputs{Trainer: CommandTrainer, Steps: 10, ResumedFrom: 5}
		}
		return res, nil
	}
	f.register(env)
	env.ExecuteWorkflow(Gang, gangInput(2, nil))
	var res nodetype.Result
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	attempts, _ := res.Outputs["attempts"].([]any)
	if res.Outputs["restarts"] != 1.0 || res.Attempt != 2 || len(attempts) != 2 ||
		!strings.Contains(attempts[0].(map[string]any)["error"].(string), "exited with code 7") {
		t.Fatalf("attempt %d, outputs %v", res.Attempt, res.Outputs)
	}
}

func TestGangDoesNotRetryADivergence(t *testing.T) {
	env := newGangTestEnv()
	f := newFakeHosts("h1", "h2")
	calls := 0
	f.run = func(ctx context.Context, in RunInput) (HostResult, error) {
		f.mu.Lock()
		calls++
		f.mu.Unlock()
		return HostResult{}, temporal.NewNonRetryableApplicationError("host 0 of 2 (h1): loss is NaN at step 3", errtype.Diverged, nil)
	}
	f.register(env)
	env.ExecuteWorkflow(Gang, gangInput(2, nil))
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !asApp(err, &appErr) || appErr.Type() != errtype.Diverged || calls > 2 {
		t.Fatalf("error %v after %d host runs: want Diverged from one gang (at most 2 host runs)", err, calls)
	}
}

func TestGangRefusesBadInputBeforeLeasing(t *testing.T) {
	env := newGangTestEnv()
	f := newFakeHosts("h1", "h2")
	f.register(env)
	env.ExecuteWorkflow(Gang, gangInput(2, map[string]any{"trainer": "builtin", "argv": nil}))
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "builtin") || len(f.leased) != 0 {
		t.Fatalf("error %v, leased %v", err, f.leased)
	}
}

// TestGangShardDataChecksRowsBeforeLeasing: with shard_data, a split
// with fewer rows than the gang's ranks fails before any host leases,
// naming the counts; one with enough forms the gang.
func TestGangShardDataChecksRowsBeforeLeasing(t *testing.T) {
	for _, rows := range []int{3, 4} {
		env := newGangTestEnv()
		f := newFakeHosts("h1", "h2")
		f.run = func(ctx context.Context, in RunInput) (HostResult, error) {
			res := HostResult{Data: &DataRead{BytesRead: 55, SplitBytes: 100}}
			if in.Host == 0 {
				res.Outputs = &Outputs{Trainer: CommandTrainer}
			}
			return res, nil
		}
		f.register(env)
		var asked ShardsInput
		env.RegisterActivityWithOptions(func(_ context.Context, in ShardsInput) error {
			asked = in
			sd := &split.Data{Manifest: checkpoint.Manifest{Datasets: []checkpoint.Dataset{{Name: split.TrainDataset, Rows: int64(rows), Files: make([]checkpoint.File, rows)}}}}
			for i := range sd.Manifest.Datasets[0].Files {
				sd.Manifest.Datasets[0].Files[i].Rows = 1
			}
			_, err := planShards(sd, in.World, nil, "", nil)
			return err
		}, activity.RegisterOptions{Name: GangShardsActivity})
		env.ExecuteWorkflow(Gang, gangInput(2, map[string]any{"processes": 2.0, "shard_data": true}))
		err := env.GetWorkflowError()
		if asked.World != 4 || asked.Data != "s3://b/split" {
			t.Errorf("asked %+v: want the split and 4 ranks", asked)
		}
		if rows == 3 {
			if err == nil || !strings.Contains(err.Error(), "3 rows in 3 files, too few for 4 ranks") || len(f.leases) != 0 {
				t.Fatalf("3 rows: error %v, leases %v: want the counts named before any lease", err, f.leases)
			}
			continue
		}
		var res nodetype.Result
		if err := env.GetWorkflowResult(&res); err != nil {
			t.Fatalf("4 rows: %v", err)
		}
		if s := res.Outputs["summary"].(string); !strings.Contains(s, "read 55% of the split") || !strings.Contains(s, " shards, first step ") || !strings.Contains(s, ", disk peak ") {
			t.Errorf("summary %q: want each host's share of the split, shards, first step and disk peak", s)
		}
	}
}

// newGangTestEnv is a workflow test environment that logs nothing.
func newGangTestEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(sdklog.NewStructuredLogger(quiet))
	env := s.NewTestWorkflowEnvironment()
	// A gang's retry takes about a second of wall clock in the test
	// environment; the SDK's default limit of 3 s failed it on a loaded
	// CI machine.
	env.SetTestTimeout(30 * time.Second)
	return env
}

func workflowOpts(name string) workflow.RegisterOptions { return workflow.RegisterOptions{Name: name} }

func asApp(err error, target **temporal.ApplicationError) bool { return errors.As(err, target) }

func TestGangOptionsKeepHeartbeats(t *testing.T) {
	o := gangOptions(&nodetype.Options{Timeout: time.Hour, Heartbeat: 0})
	if o.Heartbeat != dags.DefaultHeartbeat {
		t.Errorf("heartbeat %v with the node's heartbeat off: a dead host would go unnoticed until the timeout", o.Heartbeat)
	}
	if o := gangOptions(&nodetype.Options{Heartbeat: 10 * time.Second}); o.Heartbeat != 10*time.Second {
		t.Errorf("heartbeat %v, want the node's 10s", o.Heartbeat)
	}
}
