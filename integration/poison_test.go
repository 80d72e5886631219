package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
	"github.com/retrain-ml/retrain/workflows"
)

// TestPoisonSpecFromWebUI sends the input that used to kill workers through
// the Web UI's start request: a spec whose `when` is ~600 KB of "(". The
// parser's stack overflowed (a fatal error, not a panic), the worker died
// and every restart died again on the same workflow task. Now the run fails
// with a validation error, and the same worker then runs a normal pipeline.
func TestPoisonSpecFromWebUI(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)

	spec := "name: poison\nnodes:\n  - id: a\n    type: noop\n    when: \"" + strings.Repeat("(", 600<<10) + "\"\n"
	input, _ := json.Marshal(map[string]any{"spec": spec})
	id := startFromUI(t, queue, "poison-ui", string(input))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := runs.Wait(ctx, tclient, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, workflows.StatusFailed)
	want := `node "a": when: condition is 614400 bytes long; the limit is 4096`
	if len(res.Nodes) != 0 || !strings.Contains(res.Error, want) {
		t.Fatalf("poison run: %d nodes, error %q; want %q", len(res.Nodes), res.Error, want)
	}

	id = startFromUI(t, queue, "hello-after-poison", `{"pipeline": "hello"}`)
	res, err = runs.Wait(ctx, tclient, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, workflows.StatusSucceeded)
}

// startFromUI starts a Pipeline run the way the Web UI's Start Workflow
// form does (see TestStartFromWebUI) and returns its workflow id.
func startFromUI(t *testing.T, queue, prefix, input string) string {
	t.Helper()
	ui := server.UIAddress()
	if ui == "" {
		t.Fatal("the test stack serves no UI")
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := hc.Get(ui + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	base, _ := url.Parse(ui)
	var csrf string
	for _, c := range jar.Cookies(base) {
		if c.Name == "_csrf" {
			csrf = c.Value
		}
	}
	id := runs.NewID(prefix)
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	body, _ := json.Marshal(map[string]any{
		"workflowId":   id,
		"taskQueue":    map[string]string{"name": queue},
		"workflowType": map[string]string{"name": workflows.PipelineWorkflow},
		"input": map[string]any{"payloads": []any{map[string]any{
			"metadata": map[string]string{"encoding": enc("json/plain")},
			"data":     enc(input),
		}}},
	})
	req, _ := http.NewRequest(http.MethodPost,
		fmt.Sprintf("%s/api/v1/namespaces/%s/workflows/%s", ui, server.Namespace(), id), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-TOKEN", csrf)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("start through the UI: %d %s", resp.StatusCode, answer)
	}
	return id
}
