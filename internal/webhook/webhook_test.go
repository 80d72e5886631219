package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answers serves the statuses in turn (the last one from then on) and
// counts the calls.
func answers(t *testing.T, statuses ...int) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		w.WriteHeader(statuses[min(i, len(statuses)-1)])
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func send(t *testing.T, target Target, attempts int) Result {
	t.Helper()
	s := Sender{Backoff: time.Millisecond}
	return s.Send(context.Background(), []Target{target}, attempts, []byte(`{}`))[0]
}

// TestSendRetries: 5xx, 408 and 429 are tried again up to attempts;
// another 4xx is not (the request itself is wrong); 2xx ends it.
func TestSendRetries(t *testing.T) {
	for _, c := range []struct {
		name         string
		statuses     []int
		attempts     int
		wantAttempts int
		wantErr      string
	}{
		{"ok at once", []int{200}, 3, 1, ""},
		{"503 then ok", []int{503, 503, 204}, 3, 3, ""},
		{"429 then ok", []int{429, 200}, 3, 2, ""},
		{"408 then ok", []int{408, 200}, 3, 2, ""},
		{"always 500", []int{500}, 3, 3, "HTTP 500"},
		{"404 not retried", []int{404, 200}, 3, 1, "HTTP 404"},
		{"one attempt", []int{500, 200}, 1, 1, "HTTP 500"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, n := answers(t, c.statuses...)
			r := send(t, Target{Written: srv.URL + "/hook", URL: srv.URL + "/hook"}, c.attempts)
			if r.Attempts != c.wantAttempts || int(n.Load()) != c.wantAttempts || r.Error != c.wantErr || r.OK() != (c.wantErr == "") {
				t.Fatalf("got %+v after %d calls; want %d attempts, error %q", r, n.Load(), c.wantAttempts, c.wantErr)
			}
		})
	}
}

// TestSendMasks: a result names the URL as written, without user
// information or query, and its error never holds a secret value,
// whether the request or the resolution failed.
func TestSendMasks(t *testing.T) {
	const secret = "s3cr3t-t0ken"
	srv, _ := answers(t, 500)
	written := "http://user:${secret.PW}@" + strings.TrimPrefix(srv.URL, "http://") + "/hook/${secret.TOKEN}?k=${secret.TOKEN}"
	r := send(t, Target{
		Written: written, URL: strings.ReplaceAll(strings.ReplaceAll(written, "${secret.TOKEN}", secret), "${secret.PW}", secret),
		Secrets: []string{secret},
	}, 2)
	if r.Attempts != 2 || r.Error != "HTTP 500" {
		t.Fatalf("got %+v", r)
	}
	if want := srv.URL + "/hook/${secret.TOKEN}?..."; r.URL != want {
		t.Errorf("URL shown as %q", r.URL)
	}
	r = send(t, Target{Written: written, Secrets: []string{secret}, Err: errors.New("lookup of " + secret + " failed")}, 3)
	if r.Attempts != 0 || strings.Contains(r.Error, secret) || !strings.Contains(r.Error, "***") {
		t.Fatalf("a failed resolution shows %+v", r)
	}
	// A transport error: the request's URL (with the secret in its path)
	// is not in the message.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	r = send(t, Target{Written: deadURL + "/${secret.TOKEN}", URL: deadURL + "/" + secret, Secrets: []string{secret}}, 2)
	if r.OK() || r.Attempts != 2 || strings.Contains(r.Error, secret) || strings.Contains(r.URL, secret) {
		t.Fatalf("a dead webhook shows %+v", r)
	}
}

func TestDisplayURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:pw@h.example:8443/a/b?token=x#frag":              "https://h.example:8443/a/b?...",
		"http://h.example/reload":                                   "http://h.example/reload",
		"https://${secret.U}:${secret.P}@h.example/x?k=${secret.K}": "https://h.example/x?...",
		"http://${secret.HOST}:8080/":                               "http://${secret.HOST}:8080/",
		"::nonsense":                                                "(invalid URL)",
	} {
		if got := DisplayURL(in); got != want {
			t.Errorf("DisplayURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, ok := range []string{
		"http://serving:8080/reload", "https://hooks.example/${secret.PATH}?k=${secret.K}", "https://${secret.USER}:${secret.PW}@hooks.example/x",
	} {
		if err := CheckURL(ok); err != nil {
			t.Errorf("CheckURL(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"ftp://x/y", "serving:8080", "", "http:///path", "http://${secret.HOST}:8080/x", "https://u:p@a${secret.H}.example/"} {
		if err := CheckURL(bad); err == nil {
			t.Errorf("CheckURL(%q) passed", bad)
		}
	}
	if err := CheckURL("http://${secret.HOST}/x"); !errors.Is(err, ErrSecretInHost) {
		t.Errorf("a secret in the host: %v", err)
	}
}

func TestResolveAll(t *testing.T) {
	lookup := func(name string) (string, error) {
		if name == "TOKEN" {
			return "tok", nil
		}
		return "", errors.New("secret " + name + " is not set here")
	}
	tg := ResolveAll("https://h.example/a/${secret.TOKEN}?x=$${secret.TOKEN}", lookup)
	if tg.Err != nil || tg.URL != "https://h.example/a/tok?x=${secret.TOKEN}" || len(tg.Secrets) != 1 {
		t.Fatalf("resolved %+v", tg)
	}
	if tg := ResolveAll("https://h.example/${secret.OTHER}", lookup); tg.Err == nil || tg.URL != "" || !strings.Contains(tg.Err.Error(), "OTHER") {
		t.Fatalf("a missing secret: %+v", tg)
	}
	if tg := ResolveAll("https://h.example/${secret.TOKEN}", nil); tg.Err == nil || !strings.Contains(tg.Err.Error(), "no secrets are known here") {
		t.Fatalf("no lookup: %+v", tg)
	}
	if tg := ResolveAll("http://${secret.TOKEN}.example/", lookup); !errors.Is(tg.Err, ErrSecretInHost) || tg.URL != "" {
		t.Fatalf("a secret in the host is resolved: %+v", tg)
	}
}

func TestLocalSecrets(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "FILE_ONLY"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(SecretEnvPrefix+"FROM_ENV", "from-env")
	l := LocalSecrets(dir, "--secrets-dir")
	if v, err := l("FROM_ENV"); v != "from-env" || err != nil {
		t.Errorf("env: %q %v", v, err)
	}
	if v, err := l("FILE_ONLY"); v != "from-file" || err != nil {
		t.Errorf("file: %q %v", v, err)
	}
	if _, err := l("NOPE"); err == nil || !strings.Contains(err.Error(), "RETRAIN_SECRET_NOPE") {
		t.Errorf("missing: %v", err)
	}
	if _, err := LocalSecrets("", "--secrets-dir")("NOPE"); err == nil || !strings.Contains(err.Error(), "--secrets-dir") {
		t.Errorf("missing without a dir: %v", err)
	}
}
