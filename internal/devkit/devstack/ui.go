package devstack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

// webUI is the Temporal Web UI (ui-server v2 with its embedded assets).
type webUI struct {
	srv  *uiserver.Server
	addr string // advertised host:port
	done chan struct{}
}

// startUI starts the Web UI on bind:port, talking gRPC to frontendAddr, and
// returns once it answers its health check.
//
// ui-server's Start blocks, and on a listen error it calls the echo logger's
// Fatal, which exits the process. The port is checked just before (by
// allocatePorts, or here for a free port) so that a taken port is reported as
// an error instead; the window between the check and the bind is a few
// microseconds.
func startUI(ctx context.Context, bind, advertise string, port int, frontendAddr, namespace string) (_ *webUI, err error) {
	addr := net.JoinHostPort(advertise, strconv.Itoa(port))
	if err := checkPortFree(bind, port); err != nil {
		return nil, err
	}
	// NewServer panics on a bad config instead of returning an error.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("build UI server: %v", r)
		}
	}()
	srv := uiserver.NewServer(uioptions.WithConfigProvider(&uiconfig.Config{
		TemporalGRPCAddress: frontendAddr,
		Host:                uiHost(bind),
		Port:                port,
		EnableUI:            true, // serve the embedded assets, not only the API
		DefaultNamespace:    namespace,
		// Plain HTTP on localhost: the CSRF cookie must not require HTTPS.
		CORS: uiconfig.CORS{CookieInsecure: true},
		// No auth: Auth.Enabled stays false.
		// Starting workflows from the UI is part of the dev loop.
		StartWorkflowDisabled: false,
		// No request log lines or banner in `retrain dev` output.
		HideLogs: true,
		// The news feed is fetched from temporal.io; keep the stack offline.
		DisableNewsFetch: true,
		// RefreshInterval 0: the config is static, no reload goroutine.
	}))

	ui := &webUI{srv: srv, addr: addr, done: make(chan struct{})}
	go func() {
		defer close(ui.done)
		_ = srv.Start() // returns nil once Stop closes the listener
	}()
	if err := waitHTTPOK(ctx, "http://"+addr+"/healthz"); err != nil {
		ui.stop()
		return nil, fmt.Errorf("web UI on %s: %w", addr, err)
	}
	return ui, nil
}

// uiHost brackets IPv6 literals: ui-server joins host and port with a plain
// "%s:%d".
func uiHost(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

func (u *webUI) url() string { return "http://" + u.addr }

// stop closes the listener and open connections and waits (bounded) for the
// serving goroutine to return.
func (u *webUI) stop() {
	u.srv.Stop()
	select {
	case <-u.done:
	case <-time.After(5 * time.Second):
	}
}

func waitHTTPOK(ctx context.Context, url string) error {
	hc := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
