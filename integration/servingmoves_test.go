package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/devkit/servingsim"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/storage"
)

// TestCLIMovesTellServing: `retrain model rollback` and `model promote`
// tell the model's webhooks (here the serving stand-in, behind a token
// that only the CLI's --secrets-dir holds), which then serve the version
// the registry names, and `model history` names each delivery. With the
// stand-in down, the move is done, the command exits 3 and says how to
// tell serving again; `model notify` does once it is back.
func TestCLIMovesTellServing(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	srv := s3test.Start(t)
	reg := models.New(srv.Open(t, ""))
	for _, v := range []string{"v3", "v5"} {
		if _, err := reg.Register(ctx, "ctr-team", artifactsOf(t, "weights-"+v), v, models.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	deployer := models.Actor{Name: "retrain/ctr-canary/canary", Run: "ctr-canary-2026-11-28"}
	for _, v := range []string{"v3", "v5"} {
		if _, err := reg.Promote(ctx, "ctr-team", "production", v, deployer, "canary promoted"); err != nil {
			t.Fatal(err)
		}
	}

	const token = "sim-token-4f9a"
	sim := servingsim.New(0, "v5", nil)
	simSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("token") != token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		sim.Handler().ServeHTTP(w, r)
	}))
	defer simSrv.Close()
	secrets := t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "SIM_TOKEN"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	if err := storage.WriteDevConnection(dataDir, srv.Config("")); err != nil {
		t.Fatal(err)
	}
	retrain := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		app := &cli.App{Out: &out, Err: &errOut, LogLevel: "warn"}
		root := cli.NewRoot(app, "retrain")
		root.SetArgs(append(args, "--data-dir", dataDir))
		err := root.ExecuteContext(ctx)
		t.Logf("$ retrain %s\n%s%s(err: %v)", strings.Join(args, " "), out.String(), errOut.String(), err)
		if strings.Contains(out.String()+errOut.String(), token) || err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("retrain %v shows the secret", args)
		}
		return out.String(), err
	}
	hook := simSrv.URL + "/webhook?token=${secret.SIM_TOKEN}"

	// A secret in the host is refused before anything is written.
	if _, err := retrain("model", "webhooks", "ctr-team", "http://${secret.SIM_TOKEN}.example/webhook"); err == nil || !strings.Contains(err.Error(), "a secret may not be in the host") {
		t.Fatalf("a secret in the host: %v", err)
	}
	out, err := retrain("model", "webhooks", "ctr-team", hook, "--attempts", "2")
	if err != nil || !strings.Contains(out, simSrv.URL+"/webhook?...") {
		t.Fatalf("webhooks set: %v\n%s", err, out)
	}

	// Without the secret the CLI cannot resolve it: the move is done, and
	// the command says why serving was not told.
	_, err = retrain("model", "rollback", "ctr-team", "--reason", "v5 misbehaves", "--secrets-dir", t.TempDir())
	var exit *cli.ExitError
	if !errors.As(err, &exit) || exit.Code != cli.ExitNotNotified || !strings.Contains(err.Error(), "serving was not told") {
		t.Fatalf("rollback without the secret: %v", err)
	}
	if v, err := reg.Resolve(ctx, "ctr-team"); err != nil || v.Version != "v3" {
		t.Fatalf("production after the rollback = %s, %v", v.Version, err)
	}
	h, _ := reg.History(ctx, "ctr-team", "production")
	if len(h) != 3 || len(h[2].Notifications) != 1 || !strings.Contains(h[2].Notifications[0].Deliveries[0].Error, "secret SIM_TOKEN is not set here") || h[2].Notifications[0].Deliveries[0].Attempts != 0 {
		t.Fatalf("history of the untold rollback: %+v", h[len(h)-1])
	}
	if len(sim.Moves()) != 0 {
		t.Fatalf("the stand-in heard %+v", sim.Moves())
	}

	// With it: promote and rollback are heard, payloads as deploy's.
	out, err = retrain("model", "promote", "ctr-team", "v5", "--reason", "v5 fixed", "--secrets-dir", secrets)
	if err != nil || !strings.Contains(out, "v3 -> v5") || !strings.Contains(out, "serving told: 1 of 1 webhooks delivered") {
		t.Fatalf("promote: %v\n%s", err, out)
	}
	out, err = retrain("model", "rollback", "ctr-team", "--reason", "v5 misbehaves again", "--secrets-dir", secrets)
	if err != nil || !strings.Contains(out, "v5 -> v3") || !strings.Contains(out, "HTTP 200 after 1 attempt") {
		t.Fatalf("rollback: %v\n%s", err, out)
	}
	payloads, _ := json.MarshalIndent(sim.Moves(), "", "  ")
	t.Logf("the serving stand-in received:\n%s", payloads)
	var got []string
	for _, m := range sim.Moves() {
		got = append(got, fmt.Sprintf("#%d %s %s %s->%s by %s (%s)", m.Seq, m.Kind, m.Alias, m.PreviousVersion, m.Version, m.By, m.Reason))
	}
	me := h[2].Actor.Name // the CLI's user@host
	want := []string{
		"#4 promote production v3->v5 by " + me + " (v5 fixed)",
		"#5 rollback production v5->v3 by " + me + " (v5 misbehaves again)",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || sim.Serving() != "v3" {
		t.Fatalf("the stand-in heard %q and serves %s; want %q and v3", got, sim.Serving(), want)
	}

	// The stand-in down: the move is done, exit 3, and how to re-send.
	sim.SetDown(http.StatusServiceUnavailable)
	_, err = retrain("model", "promote", "ctr-team", "v5", "--secrets-dir", secrets)
	if !errors.As(err, &exit) || exit.Code != cli.ExitNotNotified ||
		!strings.Contains(err.Error(), "production of ctr-team moved to v5 (move #6) and stays there, but serving was not told: 1 of 1 webhooks failed") ||
		!strings.Contains(err.Error(), "retrain model notify ctr-team --alias production") {
		t.Fatalf("promote with serving down: %v", err)
	}
	if v, err := reg.Resolve(ctx, "ctr-team"); err != nil || v.Version != "v5" || sim.Serving() != "v3" {
		t.Fatalf("production = %s (%v), serving %s: want v5 and v3", v.Version, err, sim.Serving())
	}
	sim.SetDown(0)
	if out, err = retrain("model", "notify", "ctr-team", "--secrets-dir", secrets); err != nil || sim.Serving() != "v5" {
		t.Fatalf("notify: %v, serving %s\n%s", err, sim.Serving(), out)
	}

	out, err = retrain("model", "history", "ctr-team")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"told 1/1",
		"#4 ", "#5 ", simSrv.URL + "/webhook?...: HTTP 200 after 1 attempt",
		"#6 ", simSrv.URL + "/webhook?...: failed after 2 attempts: HTTP 503",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("history lacks %q:\n%s", w, out)
		}
	}
	out, err = retrain("model", "history", "ctr-team", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var moves []models.Move
	if err := json.Unmarshal([]byte(out), &moves); err != nil || len(moves) != 6 {
		t.Fatalf("history JSON: %v\n%s", err, out)
	}
	if n := moves[5].Notifications; len(n) != 2 || n[0].Failed() != 1 || n[1].Failed() != 0 || n[1].Deliveries[0].Status != 200 {
		t.Fatalf("move #6's notifications: %+v", n)
	}
}

// artifactsOf is one file of content, as artifacts to register.
func artifactsOf(t *testing.T, content string) models.Artifacts {
	t.Helper()
	a, err := models.DirArtifacts(modelDir(t, content))
	if err != nil {
		t.Fatal(err)
	}
	return a
}
