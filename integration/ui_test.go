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
	"testing"
	"time"

	"github.com/retrain-ml/retrain/runs"
)

// TestStartFromWebUI starts a run the way the Web UI's Start Workflow form
// does: the same HTTP request to the UI server, with the form's payload
// encoding and CSRF token, and input {"pipeline": "hello"}.
func TestStartFromWebUI(t *testing.T) {
	queue := newQueue(t)
	startWorker(t, queue)
	id := startFromUI(t, queue, "hello-ui", `{"pipeline": "hello"}`)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := runs.Wait(ctx, tclient, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, runs.StatusSucceeded)
	if res.Pipeline != "hello" || len(res.Nodes) != 6 {
		t.Errorf("UI-started run: pipeline %q, %d nodes", res.Pipeline, len(res.Nodes))
	}
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
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(bytes.ToLower(page), []byte("<html")) {
		t.Fatalf("GET %s: %d, %d bytes", ui, resp.StatusCode, len(page))
	}
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
		"workflowType": map[string]string{"name": runs.PipelineWorkflow},
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
