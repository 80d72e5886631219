package s3fault

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// upstream is a server that answers every request 200 "ok" and counts.
func upstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "ok "+r.Host)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func start(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// outcomes sends n requests one after another and says what became of
// each: "." answered by the server, "S" a SlowDown error, "R" reset. POST,
// because net/http resends an idempotent request whose connection was
// reset, which would hide the reset.
func outcomes(t *testing.T, p *Proxy, n int) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	var b strings.Builder
	for i := range n {
		resp, err := c.Post(p.URL()+fmt.Sprintf("/bucket/k%d", i), "text/plain", strings.NewReader("body"))
		switch {
		case err != nil && errors.Is(err, syscall.ECONNRESET):
			b.WriteString("R")
		case err != nil:
			t.Fatalf("request %d: %v", i, err)
		default:
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte("<Code>SlowDown</Code>")):
				b.WriteString("S")
			case resp.StatusCode == http.StatusOK && string(body) == "ok "+strings.TrimPrefix(p.URL(), "http://"):
				b.WriteString(".")
			default:
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
			}
		}
	}
	return b.String()
}

// TestFaultsFollowTheSeed: the same seed gives the same faults to the same
// request numbers, another seed other ones; the counts match what clients
// saw, only forwarded requests reach the server (with the Host the client
// sent), and the fractions are near the configured rates.
func TestFaultsFollowTheSeed(t *testing.T) {
	const n = 1000
	up, seen := upstream(t)
	cfg := Config{Target: up.URL, Seed: 42, SlowDownRate: 0.10, ResetRate: 0.02}
	p := start(t, cfg)
	got := outcomes(t, p, n)
	again := outcomes(t, start(t, cfg), n)
	cfg.Seed = 43
	other := outcomes(t, start(t, cfg), n)
	if got != again {
		t.Error("the same seed gave different faults")
	}
	if got == other {
		t.Error("another seed gave the same faults")
	}
	st := p.Stats()
	slow, resets := int64(strings.Count(got, "S")), int64(strings.Count(got, "R"))
	t.Logf("seed 42: %v", st)
	if st.Requests != n || st.SlowDowns != slow || st.Resets != resets || st.Forwarded != n-slow-resets {
		t.Fatalf("stats %+v; clients saw %d SlowDowns and %d resets of %d", st, slow, resets, n)
	}
	if total, want := seen.Load(), int64(strings.Count(got+again+other, ".")); total != want {
		t.Fatalf("upstream saw %d requests, clients got %d answers from it", total, want)
	}
	// 1000 draws: 10% and 2% with room for chance (about 3 standard deviations).
	if slow < 70 || slow > 130 || resets < 5 || resets > 35 {
		t.Fatalf("%d SlowDowns and %d resets of %d, want about 100 and 20", slow, resets, n)
	}
}

// TestOutageRefusesThenRecovers: during an outage the port refuses
// connections and an open connection is dropped; afterwards the same URL
// works again.
func TestOutageRefusesThenRecovers(t *testing.T) {
	up, _ := upstream(t)
	p := start(t, Config{Target: up.URL})
	c := &http.Client{Timeout: 5 * time.Second}
	get := func() error {
		resp, err := c.Get(p.URL() + "/bucket/k")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
	if err := get(); err != nil { // leaves a kept-alive connection open
		t.Fatal(err)
	}
	if err := p.Outage(500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := p.Outage(time.Second); err == nil {
		t.Error("a second outage began during the first")
	}
	began := time.Now()
	if err := get(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("during the outage: %v, want connection refused", err)
	}
	for p.Down() {
		if time.Since(began) > 5*time.Second {
			t.Fatal("still down after 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(began); d < 400*time.Millisecond {
		t.Fatalf("up again after %v, want 500ms", d)
	}
	if err := get(); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
	if st := p.Stats(); st.Outages != 1 || st.Dropped != 1 || st.Forwarded != 2 || p.Err() != nil {
		t.Fatalf("stats %+v, err %v", st, p.Err())
	}
}

func TestStartRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Target: "http://192.0.2.1:9000"}, "not a loopback"},
		{Config{Target: "s3://bucket"}, "want http://"},
		{Config{Target: "http://127.0.0.1:1", SlowDownRate: 1.5}, "SlowDownRate 1.5"},
		{Config{Target: "http://127.0.0.1:1", ResetRate: -0.1}, "ResetRate -0.1"},
		{Config{Target: "http://127.0.0.1:1", SlowDownRate: 0.6, ResetRate: 0.6}, "more than 1"},
	} {
		p, err := Start(c.cfg)
		if err == nil {
			p.Close()
			t.Errorf("%+v: started", c.cfg)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want it to say %q", c.cfg, err, c.want)
		}
	}
}

// TestDelay: every request waits Delay before it is answered, and a
// negative delay is refused.
func TestDelay(t *testing.T) {
	srv, n := upstream(t)
	p := start(t, Config{Target: srv.URL, Delay: 30 * time.Millisecond})
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range 3 {
		started := time.Now()
		resp, err := c.Get(p.URL() + fmt.Sprintf("/bucket/k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if d := time.Since(started); d < 30*time.Millisecond {
			t.Errorf("request %d answered after %v, want at least the 30ms delay", i, d)
		}
	}
	if n.Load() != 3 {
		t.Errorf("server saw %d requests, want 3", n.Load())
	}
	if _, err := Start(Config{Target: srv.URL, Delay: -time.Millisecond}); err == nil {
		t.Error("Start took a negative delay")
	}
}
