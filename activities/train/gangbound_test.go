package train

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/nodetype"
)

// The reported case: timeout 2m, hosts 3, gang_timeout 100h, two live
// hosts. The attempt fails at the node's timeout, not 100h later; both
// leases are released, and no lease was asked to hold past the 2m.
func TestGangFormingBoundedByNodeTimeout(t *testing.T) {
	env := newGangTestEnv()
	f := newFakeHosts("h1", "h2")
	f.run = func(context.Context, RunInput) (HostResult, error) {
		t.Error("a rank ran though the gang never formed")
		return HostResult{}, nil
	}
	f.register(env)
	in := gangInput(3, map[string]any{"gang_timeout": "100h"})
	in.Options.Timeout = 2 * time.Minute
	in.Options.Retry.MaxAttempts = 1
	start := env.Now()
	env.ExecuteWorkflow(Gang, in)
	took := env.Now().Sub(start)
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !asApp(err, &appErr) || appErr.Type() != errtype.GangIncomplete {
		t.Fatalf("error %v: want GangIncomplete", err)
	}
	for _, want := range []string{"2 of 3 hosts joined", "within the node's timeout 2m", "caps gang_timeout 100h", "leases were released"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if took < 2*time.Minute || took > 3*time.Minute {
		t.Errorf("failed after %v (workflow time): want the node's 2m timeout", took)
	}
	if f.released["h1"] != 1 || f.released["h2"] != 1 {
		t.Errorf("released %v: want both joined hosts released", f.released)
	}
	if len(f.leases) == 0 {
		t.Fatal("no lease asked")
	}
	for _, l := range f.leases {
		if l.Hold <= 0 || l.Hold > 2*time.Minute {
			t.Errorf("a lease asked to hold %v: want at most what is left of the node's 2m", l.Hold)
		}
		if l.Hosts != 3 || l.Processes != 1 {
			t.Errorf("lease %+v: want the gang's 3 hosts and 1 process per host, for the host's limits", l)
		}
	}
}

// A host that refuses the gang past its limits fails the attempt at once
// (every host of the queue would refuse alike), without retry, with
// what was leased released.
func TestGangFailsAtOnceWhenAHostRefusesItsLimits(t *testing.T) {
	env := newGangTestEnv()
	f := newFakeHosts("h1", "h2", "h3")
	f.refuse = func(host string) error {
		if host == "h2" {
			return temporal.NewNonRetryableApplicationError("host h2 refuses the gang: processes 30 is above this worker's limit of 16 ranks per host (--max-processes-per-host)", errtype.OverLimit, nil)
		}
		return nil
	}
	f.run = func(context.Context, RunInput) (HostResult, error) {
		t.Error("a rank ran though a host refused the gang")
		return HostResult{}, nil
	}
	f.register(env)
	in := gangInput(3, map[string]any{"processes": float64(30), "gang_timeout": "10m"})
	start := env.Now()
	env.ExecuteWorkflow(Gang, in)
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !asApp(err, &appErr) || appErr.Type() != errtype.OverLimit || !appErr.NonRetryable() ||
		!strings.Contains(err.Error(), "processes 30 is above this worker's limit of 16") {
		t.Fatalf("error %v: want the host's OverLimit refusal, not retried", err)
	}
	if took := env.Now().Sub(start); took > time.Minute {
		t.Errorf("failed after %v: want at once, not at gang_timeout", took)
	}
	for h, n := range f.leased {
		if f.released[h] != n {
			t.Errorf("leased %v, released %v: want every joined host released", f.leased, f.released)
		}
	}
}

// The limits a host checks, as the activities apply them.
func TestTrainersRefuseOverLimit(t *testing.T) {
	tr := &Trainers{Logger: quiet, Host: Host{ID: "h1", Address: "127.0.0.1"}, Limits: gang.Limits{MaxProcesses: 4, MaxHosts: 3}}
	ctx := context.Background()
	if _, err := tr.GangLease(ctx, LeaseInput{Key: "k", Processes: 30, Hosts: 2}); err == nil ||
		!strings.Contains(err.Error(), "host h1 refuses the gang: processes 30 is above this worker's limit of 4 ranks per host (--max-processes-per-host)") {
		t.Errorf("lease of 30 processes: %v", err)
	}
	if _, err := tr.GangLease(ctx, LeaseInput{Key: "k", Processes: 1, Hosts: 9}); err == nil ||
		!strings.Contains(err.Error(), "hosts 9 is above this worker's limit of 3 hosts per gang (--max-hosts)") {
		t.Errorf("lease of 9 hosts: %v", err)
	}
	if _, ok := tr.held.take("k"); ok {
		t.Error("a refused lease is held")
	}
	// The node's check, as the validator calls it.
	for _, c := range []struct {
		with map[string]any
		want string // "" passes
	}{
		{map[string]any{"trainer": "command", "argv": []any{"python3"}, "processes": float64(4)}, ""},
		{map[string]any{"trainer": "command", "argv": []any{"python3"}, "processes": float64(30)}, "processes 30 is above this worker's limit of 4"},
		{map[string]any{"trainer": "command", "argv": []any{"python3"}, "gpus": float64(8)}, "processes 8 (one per GPU) is above"},
		{map[string]any{"trainer": "command", "argv": []any{"torchrun", "t.py"}, "gpus": float64(8)}, ""},
		{map[string]any{"trainer": "command", "argv": []any{"python3"}, "processes": "${params.p}"}, ""},
		{map[string]any{"trainer": "command", "argv": []any{"python3"}, "hosts": float64(4), "processes": float64(1)}, "hosts 4 is above this worker's limit of 3"},
	} {
		err := tr.check(c.with)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.with, err, c.want)
		}
	}
}

// A single-host train node past the worker's limit fails before its data
// moves (the split does not exist: reading it would fail otherwise).
func TestTrainRefusesProcessesOverLimit(t *testing.T) {
	st := s3test.Start(t).Open(t, "")
	tr := &Trainers{Store: st, Logger: quiet, Limits: gang.Limits{MaxProcesses: 2}}
	in := nodetype.Input{Pipeline: "p", RunID: "r", Node: "train", Type: "train", With: map[string]any{
		"trainer": "command", "data": "s3://nowhere/split", "processes": 3.0, "argv": []any{"sh", "-c", "exit 0"}}}
	_, err := nodetest.Run(t, tr.Run, in, nil)
	if nodetest.ErrType(err) != errtype.OverLimit || !strings.Contains(err.Error(), "processes 3 is above this worker's limit of 2 ranks per host (--max-processes-per-host)") {
		t.Fatalf("error %v: want OverLimit naming processes, 3 and the limit 2", err)
	}
}
