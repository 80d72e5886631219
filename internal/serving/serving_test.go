package serving_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/serving"
	"github.com/retrain-ml/retrain/internal/webhook"
)

type receiver struct {
	mu     sync.Mutex
	status int
	events []serving.Event
	paths  []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var ev serving.Event
	_ = json.Unmarshal(b, &ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	r.paths = append(r.paths, req.URL.RequestURI())
	if r.status != 0 {
		w.WriteHeader(r.status)
	}
}

func register(t *testing.T, reg *models.Registry, versions ...string) {
	t.Helper()
	for _, v := range versions {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "m.bin"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := models.DirArtifacts(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Register(context.Background(), "ctr", a, v, models.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAfterMove: a move is POSTed to the model's webhooks with deploy's
// payload, ${secret.NAME} resolved by the sender, and every delivery,
// failed or not, lands in the alias history without the secret.
func TestAfterMove(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	reg := models.New(srv.Open(t, ""))
	register(t, reg, "v1", "v2")
	good, bad := &receiver{}, &receiver{status: 503}
	goodSrv, badSrv := httptest.NewServer(good), httptest.NewServer(bad)
	defer goodSrv.Close()
	defer badSrv.Close()
	const secret = "tok-123"
	by := models.Actor{Name: "alice@laptop"}
	if _, err := reg.SetWebhooks(ctx, "ctr", []string{goodSrv.URL + "/reload?t=${secret.TOKEN}", badSrv.URL + "/r/${secret.TOKEN}"}, 2, by); err != nil {
		t.Fatal(err)
	}
	n := serving.Notifier{
		Registry: reg, Sender: webhook.Sender{Backoff: time.Millisecond}, By: by,
		Secrets: func(name string) (string, error) {
			if name == "TOKEN" {
				return secret, nil
			}
			return "", errors.New("unknown " + name)
		},
	}
	if _, err := reg.Promote(ctx, "ctr", "production", "v1", by, "first"); err != nil {
		t.Fatal(err)
	}
	mv, err := reg.Promote(ctx, "ctr", "production", "v2", by, "better")
	if err != nil {
		t.Fatal(err)
	}
	o := n.AfterMove(ctx, mv, "")
	if o.OK() || o.Failed != 1 || len(o.Deliveries) != 2 || o.Err != nil || o.RecordErr != nil {
		t.Fatalf("outcome %+v", o)
	}
	if d := o.Deliveries[1]; d.Attempts != 2 || d.Error != "HTTP 503" || strings.Contains(d.URL, secret) {
		t.Errorf("the failing webhook: %+v", d)
	}
	if len(good.events) != 1 || good.paths[0] != "/reload?t="+secret || len(bad.events) != 2 || bad.paths[0] != "/r/"+secret {
		t.Fatalf("received %v %v / %v", good.paths, good.events, bad.paths)
	}
	ev := good.events[0]
	if ev.Model != "ctr" || ev.Alias != "production" || ev.Version != "v2" || ev.PreviousVersion != "v1" || ev.Seq != mv.Seq ||
		ev.Kind != "promote" || ev.By != by.Name || ev.Reason != "better" || !strings.HasPrefix(ev.Checksum, "sha256:") || ev.URI == "" {
		t.Errorf("event %+v", ev)
	}
	if !strings.Contains(o.Summary(), "NOT told") || !strings.Contains(o.Summary(), "HTTP 503") {
		t.Errorf("summary %q", o.Summary())
	}
	h, err := reg.History(ctx, "ctr", "production")
	if err != nil {
		t.Fatal(err)
	}
	notes := h[1].Notifications
	if len(notes) != 1 || notes[0].Failed() != 1 || notes[0].By != by || len(h[0].Notifications) != 0 {
		t.Fatalf("history notifications %+v", h)
	}
	b, _ := json.Marshal(h)
	if strings.Contains(string(b), secret) {
		t.Errorf("the history holds the secret: %s", b)
	}

	// Skipped URLs (sent by the caller already) are not sent again, and
	// the caller's results are recorded with the model's.
	sent := []webhook.Result{{URL: "http://node-hook/", Status: 200, Attempts: 1}}
	o = n.Notify(ctx, serving.Event{Model: "ctr", Alias: "production", Version: "v2", Seq: mv.Seq}, sent,
		[]string{badSrv.URL + "/r/${secret.TOKEN}"})
	if len(o.Deliveries) != 2 || o.Failed != 0 || len(bad.events) != 2 || len(good.events) != 2 {
		t.Fatalf("with a skip: %+v (bad got %d)", o, len(bad.events))
	}

	// A sender that knows no secrets says so and sends nothing there.
	n.Secrets = nil
	mv, err = reg.Move(ctx, models.MoveRequest{Model: "ctr", Alias: "production", Kind: models.KindRollback, By: by, Force: true, Reason: "back"})
	if err != nil {
		t.Fatal(err)
	}
	o = n.AfterMove(ctx, mv, "")
	if o.Failed != 2 || !strings.Contains(o.Deliveries[0].Error, "no secrets are known here") || len(good.events) != 2 {
		t.Fatalf("without secrets: %+v", o)
	}

	// A move that changed nothing is told to no one.
	same, err := reg.Promote(ctx, "ctr", "production", "v1", by, "")
	if err != nil || same.Changed {
		t.Fatal(same, err)
	}
	if o := n.AfterMove(ctx, same, ""); len(o.Deliveries) != 0 || !o.OK() {
		t.Errorf("an unchanged alias: %+v", o)
	}
}
