package canary

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestPrometheusAnswers reads the API's answer shapes; the integration
// tests query a real Prometheus server.
func TestPrometheusAnswers(t *testing.T) {
	answers := map[string]struct {
		code int
		body string
	}{
		"one":    {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.25"]}]}}`},
		"none":   {200, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
		"many":   {200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"v":"1"},"value":[1,"1"]},{"metric":{"v":"2"},"value":[1,"2"]}]}}`},
		"scalar": {200, `{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}`},
		"bad":    {400, `{"status":"error","errorType":"bad_data","error":"parse error"}`},
		"down":   {503, `{"status":"error","errorType":"unavailable","error":"starting"}`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" || r.FormValue("time") == "" {
			http.Error(w, "bad request", 404)
			return
		}
		a := answers[r.FormValue("query")]
		w.WriteHeader(a.code)
		w.Write([]byte(a.body))
	}))
	defer srv.Close()
	p := Prometheus{URL: srv.URL + "/"}
	ctx, now := t.Context(), time.Now()
	if v, err := p.Query(ctx, "one", now); err != nil || v == nil || *v != 0.25 {
		t.Errorf("one: %v, %v", v, err)
	}
	if v, err := p.Query(ctx, "none", now); err != nil || v != nil {
		t.Errorf("none: %v, %v", v, err)
	}
	if v, err := p.Query(ctx, "scalar", now); err != nil || v == nil || *v == *v {
		t.Errorf("scalar NaN: %v, %v", v, err)
	}
	var qe *QueryError
	if _, err := p.Query(ctx, "many", now); !errors.As(err, &qe) || !strings.Contains(err.Error(), "2 series") {
		t.Errorf("many: %v", err)
	}
	if _, err := p.Query(ctx, "bad", now); !errors.As(err, &qe) || qe.Type != "bad_data" {
		t.Errorf("bad: %v", err)
	}
	if _, err := p.Query(ctx, "down", now); err == nil || errors.As(err, &qe) {
		t.Errorf("down is retryable: %v", err)
	}
}

// TestPrometheusHeaders: the headers go with every request; a server
// that refuses them is named as refusing the credentials.
func TestPrometheusHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.Header.Get("X-Scope-OrgID") != "team-a" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"1"]}]}}`))
	}))
	defer srv.Close()
	h := http.Header{}
	h.Set("Authorization", "Bearer s3cret")
	h.Set("X-Scope-OrgID", "team-a")
	if v, err := (Prometheus{URL: srv.URL, Header: h}).Query(t.Context(), "up", time.Now()); err != nil || v == nil || *v != 1 {
		t.Errorf("with the token: %v, %v", v, err)
	}
	var log bytes.Buffer
	_, err := Prometheus{URL: srv.URL, Logger: slog.New(slog.NewTextHandler(&log, nil))}.Query(t.Context(), "up", time.Now())
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(log.String(), "HTTP 401") || !strings.Contains(log.String(), "refused the credentials") {
		t.Errorf("without: %v; log %s", err, log.String())
	}
}

// TestPrometheusErrorsAlike: a closed port, an open port that is not
// HTTP, and an HTTP service that is not Prometheus give one error, the
// same text whatever the port: a run's errors must not map a host's ports.
func TestPrometheusErrorsAlike(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	notHTTP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer notHTTP.Close()
	go func() {
		for {
			c, err := notHTTP.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			c.Close()
		}
	}()
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>admin console</html>"))
	}))
	defer admin.Close()
	var texts []string
	for _, u := range []string{closedURL, "http://" + notHTTP.Addr().String(), admin.URL} {
		_, err := Prometheus{URL: u}.Query(t.Context(), "up", time.Now())
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("%s: %v, want ErrUnreachable", u, err)
		}
		texts = append(texts, err.Error())
	}
	if texts[0] != texts[1] || texts[1] != texts[2] {
		t.Fatalf("errors differ: %q", texts)
	}
}
