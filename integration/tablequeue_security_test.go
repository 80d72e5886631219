package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	lakenodes "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/worker"
)

// promoteOnceSpec promotes one date of ml.s_user into ml.training.
const promoteOnceSpec = `
name: promote_once
params:
  date: {type: string}
nodes:
  - id: promote
    type: promote_features
    with: {training_table: ml.training, staging_tables: [ml.s_user], start_date: "${params.date}", end_date: "${params.date}"}
`

// TestTableQueueCannotBlockPromotions: a client that may only start,
// signal and terminate workflows cannot stop promotions into a table.
//
//  1. A workflow a client starts under the queue's former fixed id
//     (retrain-table-queue/QUEUE/DIGEST/TABLE, DIGEST from public names)
//     and floods with signals is not the queue any more: the promotion
//     takes its turn in the real (keyed) queue, with no note.
//  2. A client that learnt the keyed id (by listing a running queue)
//     starts a workflow of its own type under it and floods it with
//     acquire signals: the promotion lands while the flood runs, on the
//     commit's compare-and-swap, and its outputs say so.
//  3. The same with a forged TableQueue (the right type, run by the
//     worker, but started by the client with a forged holder and no
//     worker's proof): ignored the same way.
func TestTableQueueCannotBlockPromotions(t *testing.T) {
	parallelFor(t, 50*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, queue := t.TempDir(), newQueue(t)
	cfg := lake.Config{DataDir: dir}
	cat, err := lake.Open(ctx, cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: 600, Days: demoDays, Seed: 9, Users: 60, Ads: 10}, demodata.DefaultTables, false, quiet); err != nil {
		t.Fatal(err)
	}
	spec := features.StageSpec{Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"}, Alignment: "previous_day",
		Prefix: "u_", Staging: "ml.s_user", StartDate: demoStart, EndDate: demoEnd}
	if _, err := features.Stage(ctx, cat, spec, quiet); err != nil {
		t.Fatal(err)
	}
	secrets := t.TempDir()
	key := []byte("it-table-queue-key-0123456789abcdef")
	if err := os.WriteFile(filepath.Join(secrets, lakenodes.QueueKeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	wcfg := worker.Config{TaskQueue: queue, Lake: cfg}
	wcfg.Env.SecretsDir = secrets
	// On a stack of its own: its floods of signals would otherwise sit in
	// front of the other tests' calls to the shared server.
	stack, tc := ownStack(t)
	startWorkerOn(t, tc, stack.Namespace(), wcfg)

	realID := lakenodes.TableQueueID(key, queue, cfg, "ml.training")
	sum := sha256.Sum256([]byte(cfg.Identity().Key()))
	formerID := "retrain-table-queue/" + queue + "/" + hex.EncodeToString(sum[:6]) + "/ml.training"
	t.Logf("former (public) queue id %s; keyed id %s", formerID, realID)

	// floodLimit bounds the signals of one flood in the short form: well
	// past the queue's 64 requests, and each signal is a write to the
	// embedded server every parallel test shares. The long form floods
	// until the server's signal limit per execution (or the genuine
	// queue's continue-as-new) stops it.
	floodLimit := int64(1500)
	if longTests(t) {
		floodLimit = math.MaxInt64
	}
	// squat starts a workflow under id and floods it with acquire
	// signals until the returned stop is called (or floodLimit were
	// sent), which reports how many it sent and terminates the squatter.
	squat := func(t *testing.T, id, workflowType, taskQueue string, input any) (stop func() int) {
		t.Helper()
		if workflowType != "" {
			// A client may terminate a running queue, and start its own.
			_ = tc.TerminateWorkflow(ctx, id, "", "squatted")
		}
		if workflowType == "" {
			// Flood the running workflow as it is.
		} else if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, workflowType, input); err != nil {
			t.Fatalf("start the squatter: %v", err)
		}
		var sent atomic.Int64
		done := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-done:
						return
					default:
					}
					// Forged requests: whole-table ranges, named after
					// live-looking runs.
					err := tc.SignalWorkflow(ctx, id, "", "acquire", lakenodes.QueueRequest{
						WorkflowID: "forged-" + string(rune('a'+g)), RunID: "r", Label: "forged holder"})
					if err != nil {
						return // the server's signal limit: the squatter is full
					}
					if sent.Add(1) >= floodLimit {
						return
					}
				}
			}()
		}
		return func() int {
			close(done)
			wg.Wait()
			_ = tc.TerminateWorkflow(context.Background(), id, "", "test over")
			return int(sent.Load())
		}
	}
	promote := func(t *testing.T, date string) map[string]any {
		t.Helper()
		res := runRequestOn(t, tc, runs.Request{Spec: []byte(promoteOnceSpec), SpecFile: "promote_once.yaml", TaskQueue: queue,
			Params: map[string]any{"date": date}}, 2*time.Minute)
		wantStatus(t, res, runs.StatusSucceeded)
		out := node(t, res, "promote").Outputs
		t.Logf("promote %s: %v", date, out["summary"])
		return out
	}
	wantNote := func(t *testing.T, out map[string]any, parts ...string) {
		t.Helper()
		note, _ := out["queue"].(string)
		for _, p := range append(parts, "table queue unavailable (", "): promoting on the commit's compare-and-swap") {
			if !strings.Contains(note, p) {
				t.Fatalf("queue note %q, want it to hold %q", note, p)
			}
		}
		if s, _ := out["summary"].(string); !strings.Contains(s, note) {
			t.Fatalf("summary %q does not carry the note", s)
		}
	}

	t.Run("FormerIDSquatted", func(t *testing.T) {
		stop := squat(t, formerID, "squat", queue+"-nowhere", nil)
		out := promote(t, "2026-11-01")
		t.Logf("signals sent to the squatter meanwhile: %d", stop())
		if note, ok := out["queue"]; ok {
			t.Fatalf("the promotion went without the queue (%v); a workflow under the former id must not touch it", note)
		}
	})
	t.Run("KeyedIDSquattedAndFlooded", func(t *testing.T) {
		stop := squat(t, realID, "squat", queue+"-nowhere", nil)
		out := promote(t, "2026-11-02")
		n := stop()
		t.Logf("signals sent to the squatter while the promotion ran: %d", n)
		if n == 0 {
			t.Fatal("the flood sent nothing")
		}
		wantNote(t, out, `is a "squat", not a TableQueue a retrain worker started`)
	})
	t.Run("RealQueueFlooded", func(t *testing.T) {
		// The genuine queue, running (a promotion just used it), flooded
		// with forged acquire signals up to the server's signal limit.
		promote(t, "2026-11-01")
		stop := squat(t, realID, "", "", nil)
		time.Sleep(time.Second)
		start := time.Now()
		out := promote(t, "2026-11-02")
		t.Logf("signals sent to the genuine queue: %d; the promotion took %s; queue note: %q", stop(), time.Since(start).Round(time.Millisecond), out["queue"])
	})
	t.Run("ForgedTableQueue", func(t *testing.T) {
		forged := lakenodes.QueueState{Table: "ml.training", Holders: []lakenodes.QueueRequest{{WorkflowID: realID, RunID: "", Label: "forged holder"}},
			Proof: strings.Repeat("0", 32)}
		stop := squat(t, realID, lakenodes.TableQueueWorkflow, queue, forged)
		out := promote(t, "2026-11-03")
		t.Logf("signals sent to the forged queue while the promotion ran: %d", stop())
		wantNote(t, out, "was not started by a retrain worker")
	})
}
