// Command standin runs the serving stand-in (package servingsim) and a
// real Prometheus scraping it, for trying canary deploys by hand:
//
//	go run ./internal/devkit/servingsim/standin --listen 127.0.0.1:9201 --prometheus-dir /tmp/prom \
//	    --version v1=ctr:0.10,latency:40ms --version v2=ctr:0.07,latency:40ms
//
// It prints Prometheus's URL and the webhook URL for a canary node's
// prometheus_url and webhooks, serves until interrupted, and with --log
// writes each traffic split a webhook sends.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/promtest"
	"github.com/retrain-ml/retrain/internal/devkit/servingsim"
)

type versions map[string]servingsim.Behaviour

func (v versions) String() string { return fmt.Sprint(map[string]servingsim.Behaviour(v)) }

// Set reads NAME=ctr:0.1,latency:40ms[,slow_above:25,slow_latency:600ms][,label:x].
func (v versions) Set(s string) error {
	name, spec, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("--version %q: want NAME=ctr:0.1,latency:40ms", s)
	}
	b := servingsim.Behaviour{CTR: 0.1, Latency: 40 * time.Millisecond}
	for _, kv := range strings.Split(spec, ",") {
		k, val, _ := strings.Cut(kv, ":")
		var err error
		switch k {
		case "ctr":
			b.CTR, err = strconv.ParseFloat(val, 64)
		case "latency":
			b.Latency, err = time.ParseDuration(val)
		case "slow_above":
			b.SlowAbove, err = strconv.ParseFloat(val, 64)
		case "slow_latency":
			b.SlowLatency, err = time.ParseDuration(val)
		case "label":
			b.Label = val
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return fmt.Errorf("--version %s: %s: %w", name, k, err)
		}
	}
	v[name] = b
	return nil
}

func main() {
	vs := versions{}
	listen := flag.String("listen", "127.0.0.1:9201", "address of /metrics and /webhook")
	production := flag.String("production", "v1", "the version serving all traffic until a webhook splits it")
	perSecond := flag.Float64("rate", 2000, "impressions per second")
	promDir := flag.String("prometheus-dir", "", "start a Prometheus scraping the stand-in every second, its data here")
	flag.Var(vs, "version", "NAME=ctr:0.1,latency:40ms[,slow_above:25,slow_latency:600ms][,label:x] (repeat)")
	flag.Parse()
	if err := run(*listen, *production, *perSecond, *promDir, vs); err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
}

func run(listen, production string, perSecond float64, promDir string, vs versions) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, ok := vs[production]; !ok {
		vs[production] = servingsim.Behaviour{CTR: 0.1, Latency: 40 * time.Millisecond}
	}
	sim := servingsim.New(perSecond, production, vs)
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: logSplits(sim)}
	go srv.Serve(l)
	defer srv.Close()
	done := make(chan struct{})
	go sim.Run(done)
	defer close(done)
	fmt.Printf("serving stand-in: http://%s/metrics, webhook http://%s/webhook\n", l.Addr(), l.Addr())
	if promDir != "" {
		if err := os.MkdirAll(promDir, 0o755); err != nil {
			return err
		}
		prom, err := promtest.Start(ctx, promDir, []string{l.Addr().String()}, time.Second)
		if err != nil {
			return err
		}
		defer prom.Stop()
		fmt.Printf("prometheus: %s\n", prom.URL)
	}
	<-ctx.Done()
	return nil
}

// logSplits serves sim and prints each split a webhook sends.
func logSplits(sim *servingsim.Sim) http.Handler {
	next := sim.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if r.URL.Path == "/webhook" {
			if s := sim.Splits(); len(s) > 0 {
				sp := s[len(s)-1]
				fmt.Printf("%s webhook: %s production %s, canary %s at %g%% (%s)\n",
					sp.Received.UTC().Format(time.TimeOnly+".000"), sp.Model, sp.Production, sp.Canary, sp.CanaryPercent, sp.Event)
			}
		}
	})
}
