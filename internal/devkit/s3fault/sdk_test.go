package s3fault_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/s3fault"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// TestStoreRetriesEveryInjectedFault puts and reads back objects through
// the proxy in front of a real S3 server (versitygw) failing a quarter of
// the requests: every operation succeeds, every object reads back
// intact, and the store retried once per injected SlowDown and once per
// reset, except resets of reads that net/http resent by itself (on a
// reused connection it resends a GET or HEAD once, unseen by the SDK).
func TestStoreRetriesEveryInjectedFault(t *testing.T) {
	srv := s3test.Start(t)
	p, err := s3fault.Start(s3fault.Config{Target: srv.Endpoint, Seed: 3, SlowDownRate: 0.20, ResetRate: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := srv.Config("faults")
	cfg.Endpoint = p.URL()
	cfg.MaxBackoff = 20 * time.Millisecond                      // the policy's shape, not its patience, is under test
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil)) // the retry warnings, with -v
	reasons := map[string]int64{}
	cfg.OnRetry = func(ev s3store.RetryEvent) { reasons[ev.Reason]++ }
	st, err := s3store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		key := fmt.Sprintf("obj-%d", i)
		body := bytes.Repeat([]byte{byte(i)}, 1000+i*100)
		if _, err := st.PutBytes(t.Context(), key, body); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		got, _, err := st.GetBytes(t.Context(), key)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("%s read back %d bytes, wrote %d", key, len(got), len(body))
		}
	}
	stats := p.Stats()
	t.Logf("%v; store retried %d requests", stats, st.Retries())
	if stats.SlowDowns == 0 || stats.Resets == 0 {
		t.Fatalf("no faults injected: %v", stats)
	}
	throttled, conn := reasons[s3store.RetryThrottled], reasons[s3store.RetryConnection]
	if throttled != stats.SlowDowns || conn > stats.Resets || conn < stats.Resets-stats.ResetReads || throttled+conn != st.Retries() {
		t.Fatalf("store counted %d retries (%v by reason); proxy injected %d SlowDowns and %d resets, %d of them of reads",
			st.Retries(), reasons, stats.SlowDowns, stats.Resets, stats.ResetReads)
	}
}
