// Package s3fault is a fault-injecting reverse proxy for an S3 server, for
// tests of how retrain behaves on a degraded object store. It listens on
// loopback only and forwards to a loopback server; in between it answers a
// chosen fraction of requests with S3's own 503 SlowDown error, resets a
// fraction of connections (a TCP RST instead of an answer), and can be made
// unreachable for a while (its port refuses connections and the open ones
// are dropped).
//
// Which request gets which fault is a function of the seed and the
// request's arrival number, so a run with the same seed and the same
// sequence of requests meets the same faults. Concurrent clients make the
// arrival order, not the fault sequence, vary.
//
// Faults are injected before the request reaches the server: a failed
// request changed nothing there, which is what an SDK retry assumes of a
// 503 and of a connection that broke before any answer.
package s3fault

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrain-ml/retrain/internal/splitmix"
)

// Config says where the proxy forwards and what it breaks.
type Config struct {
	// Target is the S3 server's base URL, http://127.0.0.1:PORT (loopback
	// only: this is a test tool, never a relay).
	Target string
	// Seed chooses which requests fail.
	Seed uint64
	// SlowDownRate is the fraction of requests answered 503 SlowDown, and
	// ResetRate the fraction whose connection is reset. Both in [0, 1],
	// their sum at most 1.
	SlowDownRate float64
	ResetRate    float64
	// Delay is added before every request is answered or forwarded: the
	// round trip of a real S3 endpoint (in-region S3 answers in about
	// 10-30 ms), which loopback lacks. Benchmarks put 20 ms here to see
	// what a lake's request count costs at S3's latency. 0: none.
	Delay time.Duration
	// Logger receives a debug line per injected fault. Default: discard.
	Logger *slog.Logger
}

// Stats counts what the proxy saw and did.
type Stats struct {
	Requests  int64 // HTTP requests received
	Forwarded int64 // passed on to the server
	SlowDowns int64 // answered 503 SlowDown
	Resets    int64 // connections reset instead of an answer
	// ResetReads are the Resets of GET and HEAD requests. Go's
	// net/http resends such a request by itself, once, when its
	// connection was a reused one, so an SDK above it may see no error
	// and count no retry for it.
	ResetReads int64
	Outages    int64 // periods of unreachability begun
	Dropped    int64 // open connections closed when an outage began
}

// Proxy is a running fault proxy.
type Proxy struct {
	cfg   Config
	addr  string // 127.0.0.1:PORT, kept across outages
	srv   *http.Server
	rp    *httputil.ReverseProxy
	log   *slog.Logger
	serve sync.WaitGroup

	requests, forwarded, slowDowns, resets, resetReads, outages, dropped atomic.Int64

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	down   bool
	timer  *time.Timer
	closed bool
	err    error // the last failure to listen again after an outage
}

// Start checks cfg and starts a proxy on a free loopback port.
func Start(cfg Config) (*Proxy, error) {
	target, err := url.Parse(cfg.Target)
	if err != nil || target.Scheme != "http" || target.Host == "" {
		return nil, fmt.Errorf("s3fault: target %q: want http://127.0.0.1:PORT", cfg.Target)
	}
	if !isLoopback(target.Hostname()) {
		return nil, fmt.Errorf("s3fault: target %q is not a loopback address", cfg.Target)
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"SlowDownRate", cfg.SlowDownRate}, {"ResetRate", cfg.ResetRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			return nil, fmt.Errorf("s3fault: %s %v: want a fraction in [0, 1]", r.name, r.v)
		}
	}
	if cfg.Delay < 0 {
		return nil, fmt.Errorf("s3fault: Delay %v is negative", cfg.Delay)
	}
	if cfg.SlowDownRate+cfg.ResetRate > 1 {
		return nil, fmt.Errorf("s3fault: SlowDownRate %v + ResetRate %v is more than 1", cfg.SlowDownRate, cfg.ResetRate)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("s3fault: %w", err)
	}
	p := &Proxy{
		cfg:   cfg,
		addr:  ln.Addr().String(),
		log:   cfg.Logger,
		ln:    ln,
		conns: map[net.Conn]struct{}{},
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			// The client signed the Host it sent (SigV4): the server
			// must see it unchanged.
			r.Out.Host = r.In.Host
		},
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		ConnState:         p.track,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.startServing(ln)
	return p, nil
}

// URL is the proxy's base URL, to use as an S3 endpoint.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Requests: p.requests.Load(), Forwarded: p.forwarded.Load(),
		SlowDowns: p.slowDowns.Load(), Resets: p.resets.Load(), ResetReads: p.resetReads.Load(),
		Outages: p.outages.Load(), Dropped: p.dropped.Load(),
	}
}

// String summarizes the stats for test logs.
func (s Stats) String() string {
	return fmt.Sprintf("%d requests: %d forwarded, %d answered 503 SlowDown, %d connections reset (%d of them reads); %d outages dropping %d connections",
		s.Requests, s.Forwarded, s.SlowDowns, s.Resets, s.ResetReads, s.Outages, s.Dropped)
}

// ServeHTTP decides the fate of request number n.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := uint64(p.requests.Add(1))
	if p.cfg.Delay > 0 {
		// Before the answer's headers, as a distant server's latency is:
		// the client's clock for the first byte runs meanwhile.
		t := time.NewTimer(p.cfg.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	switch u := p.draw(n); {
	case u < p.cfg.SlowDownRate:
		p.slowDowns.Add(1)
		p.log.Debug("s3fault: 503 SlowDown", "request", n, "method", r.Method, "path", r.URL.Path)
		writeSlowDown(w, r, n)
	case u < p.cfg.SlowDownRate+p.cfg.ResetRate:
		p.resets.Add(1)
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			p.resetReads.Add(1)
		}
		p.log.Debug("s3fault: connection reset", "request", n, "method", r.Method, "path", r.URL.Path)
		reset(w)
	default:
		p.forwarded.Add(1)
		p.rp.ServeHTTP(w, r)
	}
}

// draw is request n's uniform number in [0, 1).
func (p *Proxy) draw(n uint64) float64 {
	return float64(splitmix.Mix64(p.cfg.Seed^splitmix.Mix64(n))>>11) / (1 << 53)
}

// writeSlowDown answers as S3 does when a prefix gets more requests than
// it can take.
func writeSlowDown(w http.ResponseWriter, r *http.Request, n uint64) {
	id := fmt.Sprintf("s3fault-%d", n)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("x-amz-request-id", id)
	// Read the body first: answered while a client still sends a large
	// part, the 503 may reach it as a broken connection instead, and the
	// client would not see a SlowDown at all.
	io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusServiceUnavailable)
	if r.Method == http.MethodHead {
		return
	}
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><Resource>%s</Resource><RequestId>%s</RequestId></Error>`, html.EscapeString(r.URL.Path), id)
}

// reset closes the request's connection with a TCP RST (SO_LINGER 0), so
// the client sees "connection reset by peer" and no answer.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection, without the RST
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// Outage makes the proxy unreachable for d: its port refuses connections
// and every open connection is closed at once. It returns at once; the
// port listens again after d.
func (p *Proxy) Outage(d time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("s3fault: proxy closed")
	}
	if p.down {
		return errors.New("s3fault: already in an outage")
	}
	p.down = true
	p.outages.Add(1)
	p.ln.Close()
	for c := range p.conns {
		p.dropped.Add(1)
		c.Close()
	}
	p.log.Debug("s3fault: outage", "for", d)
	p.timer = time.AfterFunc(d, p.up)
	return nil
}

// Down reports whether an outage is going on.
func (p *Proxy) Down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// up ends an outage by listening on the same port again. The port was
// free for the outage's length; on loopback nothing else takes it in
// practice, and if something does, Err says so and the proxy stays down.
func (p *Proxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.err = fmt.Errorf("s3fault: listen again on %s after the outage: %w", p.addr, err)
		return
	}
	p.ln, p.down = ln, false
	p.startServing(ln)
	p.log.Debug("s3fault: reachable again")
}

// Err reports a failure to come back from an outage.
func (p *Proxy) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// startServing serves ln until it is closed.
func (p *Proxy) startServing(ln net.Listener) {
	p.serve.Add(1)
	go func() {
		defer p.serve.Done()
		// Serve returns when ln is closed, by an outage or Close.
		_ = p.srv.Serve(ln)
	}()
}

// track keeps the set of open connections, which an outage closes.
func (p *Proxy) track(c net.Conn, state http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch state {
	case http.StateNew:
		if p.down || p.closed {
			// Accepted just before the listener closed.
			c.Close()
			return
		}
		p.conns[c] = struct{}{}
	case http.StateHijacked, http.StateClosed:
		delete(p.conns, c)
	}
}

// Close stops the proxy, ending any outage, and waits for its server.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = p.srv.Close()
	}
	p.serve.Wait()
	return err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
