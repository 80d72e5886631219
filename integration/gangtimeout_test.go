//go:build cgo

package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/gpu/nvmlhost"
	"github.com/retrain-ml/retrain/internal/devkit/nvmlmock"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// TestGangTimeout: a train node with hosts: 2 and gang_timeout: 20s when
// only one GPU worker (go-nvml's mock DGX H100) polls its queue. The one
// host joins, leasing a GPU; the attempt fails after about 20 s saying 1
// of 2 hosts joined; the lease is released (the worker's
// retrain_gpus_leased gauge is 0) and no rank ever started.
func TestGangTimeout(t *testing.T) {
	parallelFor(t, 30*time.Second)
	queue := newQueue(t)
	gpuQueue := queue + "-gpu"
	startWorker(t, queue) // the run and its gang workflow
	w := startWorkerWith(t, worker.Config{
		TaskQueue: queue + "-solo", GPU: true, GPUQueue: gpuQueue, TrustedQueues: []string{queue},
		MetricsAddr: "127.0.0.1:0", Host: worker.HostConfig{ID: "solo"},
		OpenGPUs: func() (worker.GPUHost, error) {
			h, err := nvmlhost.Open(nvmlhost.WithLibrary(nvmlmock.DGX(0)), nvmlhost.WithXIDPollTimeout(2*time.Millisecond))
			if err != nil {
				return nil, err
			}
			return h, nil
		},
	})

	marker := filepath.Join(t.TempDir(), "rank-started")
	spec := fmt.Sprintf(`name: gang-timeout
nodes:
  - id: train
    type: train
    queue: %s
    retry: {max_attempts: 1}
    with:
      trainer: command
      data: s3://nowhere/split
      gpus: 1
      hosts: 2
      gang_timeout: 20s
      argv: ["sh", "-c", "touch %s"]
`, gpuQueue, marker)
	// The worker samples its lease gauge every 15 s: read it each second
	// while the gang waits (the joined host holds a GPU) and after.
	leased := func() string {
		resp, err := http.Get("http://" + w.MetricsAddr() + "/metrics")
		if err != nil {
			return "?"
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if m := regexp.MustCompile(`(?m)^retrain_gpus_leased (\S+)$`).FindStringSubmatch(string(body)); m != nil {
			return m[1]
		}
		return "?"
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := runs.Start(ctx, tclient, runs.Request{Spec: []byte(spec), SpecFile: "gang-timeout.yaml", TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	heldSeen := false
	done := make(chan *runs.Result, 1)
	go func() {
		res, err := runs.Wait(ctx, tclient, run.ID, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var res *runs.Result
	for finished := false; !finished; {
		select {
		case res = <-done:
			finished = true
		case <-time.After(time.Second):
			heldSeen = heldSeen || leased() == "1"
		}
	}
	if res == nil {
		t.FailNow() // Wait failed, and said why
	}
	took := time.Since(start)
	wantStatus(t, res, runs.StatusFailed)
	t.Logf("failed after %v: %s", took.Round(100*time.Millisecond), res.Error)
	for _, want := range []string{"1 of 2 hosts joined", "gang_timeout 20s", "(joined: solo)", gpuQueue, "no rank started"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error %q: want it to say %q", res.Error, want)
		}
	}
	if took < 20*time.Second || took > 50*time.Second {
		t.Errorf("the run failed after %v: want the 20 s gang_timeout and little more", took)
	}
	if !heldSeen {
		t.Errorf("the solo host's gauge never showed its lease while the gang waited")
	}
	for deadline := time.Now().Add(20 * time.Second); leased() != "0"; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("retrain_gpus_leased %s 20 s after the gang timed out: want 0 (the joined host's lease released)", leased())
		}
	}
	t.Logf("the solo host held 1 GPU while the gang waited; retrain_gpus_leased 0 after")
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a rank started (%s exists)", marker)
	}
}
