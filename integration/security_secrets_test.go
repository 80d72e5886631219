package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
)

// showScript prints, for each variable named in argv[2:], the marker
// argv[1] next to the value raw, JSON-escaped (for these ASCII values
// also Go's %q) and URL-encoded, on stdout and stderr, and writes them to
// its outputs; with "--fail" first it prints them to stderr and exits 3,
// so the step's error quotes them.
const showScript = `import json, os, sys
from urllib.parse import quote
args = sys.argv[1:]
fail = args[0] == "--fail"
if fail:
    args = args[1:]
m, outs = args[0], {"m": args[0]}
for k in args[1:]:
    v = os.environ[k]
    for form, s in (("raw", v), ("json", json.dumps(v)), ("url", quote(v, safe=""))):
        print(m, k, form, s, file=sys.stderr if fail else sys.stdout)
        outs[k + "_" + form] = s
if fail:
    sys.exit(3)
open(os.environ["RETRAIN_OUTPUTS"], "w").write(json.dumps(outs))
`

// paramScript prints the MODEL variable a param fed, sends it to the
// listener (argv[1]) and writes it and a transformed copy to its outputs.
const paramScript = `import json, os, sys, urllib.parse, urllib.request
v = os.environ["MODEL"]
print("seen=" + v)
urllib.request.urlopen(sys.argv[1] + "/show?v=" + urllib.parse.quote(v, safe=""), data=v.encode()).read()
open(os.environ["RETRAIN_OUTPUTS"], "w").write(json.dumps({"model": v, "upper": v.upper()}))
`

// writePipelines writes the operator's pipelines: the only specs runs
// may name.
func (e *secEnv) writePipelines(t *testing.T) {
	t.Helper()
	q := strconv.Quote
	hook := "http://127.0.0.1:" + e.port
	files := map[string]string{
		// A deploy notifying a webhook a param names, and a step whose
		// environment a param sets (case 4).
		"ship.yaml": `name: ship
params:
  candidate: {type: string}
  notify: {type: string}
  model: {type: string, default: none}
nodes:
  - id: deploy
    type: deploy
    with:
      model: ship
      dir: ${params.candidate}
      webhooks: ["${params.notify}"]
      webhook_attempts: 1
  - id: show
    type: command
    retry: {max_attempts: 1}
    with:
      env: {MODEL: "${params.model}"}
      argv: [python3, -c, ` + q(paramScript) + `, ` + q(hook) + `]
`,
		// A secret in a webhook's host (case 5).
		"hosty.yaml": `name: hosty
nodes:
  - id: deploy
    type: deploy
    with:
      model: hosty
      dir: ` + q(e.modelDir) + `
      webhooks: ["http://${secret.HOSTY}:` + e.port + `/hosty"]
      webhook_attempts: 1
`,
		// A step printing secrets in every form, and a webhook URL that
		// no longer parses once its secret is in (case 6).
		"mask.yaml": `name: mask
nodes:
  - id: show
    type: command
    with:
      env: {DB: "${secret.DB_PASS}", MULTI: "${secret.MULTI}", TOKEN: "${secret.API_TOKEN}"}
      argv: [python3, -c, ` + q(showScript) + `, "${params.marker}", DB, MULTI, TOKEN]
  - id: notify
    type: deploy
    needs: [show]
    retry: {max_attempts: 1}
    with:
      model: mask
      dir: ` + q(e.modelDir) + `
      webhooks: ["` + hook + `/mask?k=${secret.MULTI}&d=${secret.DB_PASS}"]
      webhook_attempts: 1
params:
  marker: {type: string}
`,
		// A failing step whose error quotes secrets (case 6).
		"maskfail.yaml": `name: maskfail
params:
  marker: {type: string}
nodes:
  - id: fail
    type: command
    retry: {max_attempts: 1}
    with:
      env: {DB: "${secret.DB_PASS}", MULTI: "${secret.MULTI}"}
      argv: [python3, -c, ` + q(showScript) + `, --fail, "${params.marker}", DB, MULTI]
`,
		// A param echoed (case 7).
		"echoer.yaml": `name: echoer
params:
  x: {type: string, default: ""}
nodes:
  - id: e
    type: command
    with: {argv: [echo, "${params.x}"]}
`,
	}
	maps.Copy(files, leakySpecs(e.modelDir))
	for name, body := range files {
		writeFile(t, filepath.Join(e.pipelines, name), body)
	}
}

// run starts pipeline name on the production queue and waits, at most
// limit, for its result and the error type it failed with. A run still
// going at limit is terminated and fails the test.
func (e *secEnv) run(t *testing.T, name string, params map[string]any, limit time.Duration) (*runs.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	run, err := runs.Start(ctx, tclient, runs.Request{Pipeline: name, Params: params, TaskQueue: e.queue})
	if err != nil {
		t.Fatal(err)
	}
	return e.wait(t, ctx, run.ID)
}

func (e *secEnv) wait(t *testing.T, ctx context.Context, id string) (*runs.Result, string) {
	t.Helper()
	res, err := runs.Wait(ctx, tclient, id, nil)
	if err != nil {
		_ = tclient.TerminateWorkflow(context.Background(), id, "", "security test: run did not end in time")
		t.Fatalf("run %s: %v (terminated)", id, err)
	}
	return res, errorType(tclient.GetWorkflow(ctx, id, "").Get(ctx, nil))
}

// secretInParam: `retrain run ship -p 'notify=...${secret.DB_PASS}' -p
// 'model=${secret.DB_PASS}'`: the references arrive in params, so they
// stay text. The webhook and the step see the literal, the listener never
// the secret, and the outputs hold the literal (case 4, weakness 2).
func (e *secEnv) secretInParam(t *testing.T) {
	ref := "${secret.DB_PASS}"
	out, err := retrainCLI(t, "run", "ship", "--task-queue", e.queue,
		"-p", "candidate="+e.modelDir,
		"-p", "notify=http://127.0.0.1:"+e.port+"/n?x="+ref,
		"-p", "model="+ref)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Fields(out)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, _ := e.wait(t, ctx, id)
	e.wantNoSecret(t, "the listener", []byte(strings.Join(append(e.hook.got("/n"), e.hook.got("/show")...), "\n")))
	show := res.Node("show")
	if show == nil || show.Status != runs.NodeSucceeded {
		t.Fatalf("show: %+v (run %s: %s)", show, res.Status, res.Error)
	}
	if show.Outputs["model"] != ref {
		t.Errorf("show's outputs model = %q, want the literal %s", show.Outputs["model"], ref)
	}
	if got := e.hook.got("/show"); len(got) != 1 || !strings.Contains(got[0], ref) {
		t.Errorf("the step sent the listener %q, want the literal %s", got, ref)
	}
	for _, r := range e.hook.got("/n") {
		t.Logf("webhook request: %q", r)
	}
	b, _ := json.Marshal(res)
	e.wantNoSecret(t, "the result", b)
	t.Logf("run %s: %s; show outputs %v; webhook requests %d", id, res.Status, show.Outputs, len(e.hook.got("/n")))
}

// secretInHost: a webhook whose host is ${secret.HOSTY} fails the
// pipeline's validation, naming the host, before any node (case 5,
// weakness 3).
func (e *secEnv) secretInHost(t *testing.T) {
	res, typ := e.run(t, "hosty", nil, 2*time.Minute)
	if res.Status != runs.StatusFailed || typ != errtype.InvalidPipeline || !strings.Contains(res.Error, "host") {
		t.Errorf("hosty: %s (%s): %s; want failed as %s naming the host", res.Status, typ, res.Error, errtype.InvalidPipeline)
	} else {
		t.Logf("refused: %s", res.Error)
	}
	for _, n := range res.Nodes {
		if n.Status != runs.NodePending && n.Status != "" {
			t.Errorf("node %s is %s: something ran", n.ID, n.Status)
		}
	}
	if got := e.hook.got("/hosty"); len(got) > 0 {
		t.Errorf("the listener got %q", got)
	}
}

// masking: secrets printed raw, multi-line, JSON-escaped, %q-quoted and
// URL-encoded, a webhook error quoting its URL with the secret in (%q),
// and a failing step's error quoting them are in none of the worker's
// log, the runs' histories, results and reports, nor the server's
// database, while the marker printed next to them is (case 6, weakness 4).
func (e *secEnv) masking(t *testing.T) {
	marker := randomValue(t, "marker-")
	dir := t.TempDir()
	var artifacts []string // files that must hold the marker and no secret
	results := map[string]*runs.Result{}
	for _, name := range []string{"mask", "maskfail"} {
		res, _ := e.run(t, name, map[string]any{"marker": marker}, 2*time.Minute)
		results[name] = res
		t.Logf("%s: %s %s", name, res.Status, res.Error)
		for _, n := range res.Nodes {
			t.Logf("  %s: %s outputs %v error %q", n.ID, n.Status, n.Outputs, n.Error)
		}
		result, _ := json.MarshalIndent(res, "", "  ") // what `retrain status --json` prints
		artifacts = append(artifacts, e.save(t, dir, name+"-result.json", result),
			e.save(t, dir, name+"-history.json", historyJSON(t, res.ID)))
		report := filepath.Join(dir, name+"-report.html")
		if err := cli.WriteRunReport(context.Background(), tclient, nil, res, report, cli.ReportLinks{}); err != nil {
			t.Fatal(err)
		}
		artifacts = append(artifacts, report)
	}
	if n := node(t, results["mask"], "show"); n.Status != runs.NodeSucceeded {
		t.Errorf("mask's show step: %s: %s", n.Status, n.Error)
	}
	if n := node(t, results["maskfail"], "fail"); n.Status != runs.NodeFailed || !strings.Contains(n.Error, marker) {
		t.Errorf("maskfail's step: %s: %q; want failed quoting its stderr", n.Status, n.Error)
	}
	// The worker writes its log as it goes; give it a moment to flush.
	time.Sleep(500 * time.Millisecond)
	artifacts = append(artifacts, e.logPath)
	dbFiles, _ := filepath.Glob(server.DatabasePath() + "*")
	for _, f := range artifacts {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(marker)) {
			t.Errorf("%s has no marker: the grep would prove nothing", filepath.Base(f))
		}
		e.wantNoSecret(t, filepath.Base(f), b)
		t.Logf("%s: %d bytes, marker found, %d forms of %d secrets looked for", filepath.Base(f), len(b), len(e.forms()), len(e.planted))
	}
	// The server's database: its files lag; the marker shows they caught up.
	deadline := time.Now().Add(30 * time.Second)
	for found := false; !found && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, f := range dbFiles {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(marker)) {
				found = true
			}
		}
	}
	for _, f := range dbFiles {
		if b, err := os.ReadFile(f); err == nil {
			e.wantNoSecret(t, filepath.Base(f), b)
		}
	}
}

func (e *secEnv) save(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	writeFile(t, p, string(b))
	return p
}

// forms are what a grep for the planted secrets looks for, by name: each
// value raw, %q-quoted, JSON-escaped and URL-encoded, each line of a
// multi-line one, and each random core (which every escaped form keeps,
// so this finds forms not listed too).
func (e *secEnv) forms() map[string]string {
	out := map[string]string{}
	for _, p := range e.planted {
		q, _ := json.Marshal(p.value)
		out[p.name+" raw"] = p.value
		out[p.name+" %q"] = strings.Trim(strconv.Quote(p.value), `"`)
		out[p.name+" JSON"] = strings.Trim(string(q), `"`)
		out[p.name+" URL query"] = url.QueryEscape(p.value)
		out[p.name+" URL path"] = url.PathEscape(p.value)
		for i, c := range p.cores {
			out[fmt.Sprintf("%s core %d", p.name, i)] = c
		}
	}
	return out
}

// wantNoSecret fails the test for each form of a planted secret in b,
// letter case ignored (an upper-cased copy counts).
func (e *secEnv) wantNoSecret(t *testing.T, where string, b []byte) {
	t.Helper()
	lower := bytes.ToLower(b)
	for name, f := range e.forms() {
		if n := bytes.Count(lower, bytes.ToLower([]byte(f))); n > 0 {
			t.Errorf("%s: %d occurrences of %s", where, n, name)
		}
	}
}

// historyJSON is a run's history as JSON lines, one event each, with
// payloads decoded (protojson writes their bytes as base64).
func historyJSON(t *testing.T, id string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := tclient.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var buf bytes.Buffer
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		b, err := protojson.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		b, _ = json.Marshal(decodePayloads(v))
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// decodePayloads replaces each payload's base64 data with its text.
func decodePayloads(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = decodePayloads(x)
		}
		if s, ok := v["data"].(string); ok && v["metadata"] != nil {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				v["data"] = string(b)
			}
		}
	case []any:
		for i, x := range v {
			v[i] = decodePayloads(x)
		}
	}
	return v
}

// amplification: a 40 KB param of date_range expressions fails the run
// at once as InvalidPipeline, and the worker's memory stays where it was
// (case 7, weakness 5). A run still going after 30 s is terminated.
func (e *secEnv) amplification(t *testing.T) {
	expr := "${date_range('2000-01-01','2027-01-01')}"
	x := strings.Repeat(expr, 40*1024/len(expr)+1)
	pid := e.proc.Process.Pid
	before := procKB(t, pid, "VmRSS")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	run, err := runs.Start(ctx, tclient, runs.Request{Pipeline: "echoer", Params: map[string]any{"x": x}, TaskQueue: e.queue})
	if err != nil {
		t.Fatal(err)
	}
	res, err := runs.Wait(ctx, tclient, run.ID, nil)
	took := time.Since(start)
	after, peak := procKB(t, pid, "VmRSS"), procKB(t, pid, "VmHWM")
	t.Logf("worker RSS before %d MB, after %d MB (peak over its life %d MB)", before/1024, after/1024, peak/1024)
	if err != nil {
		_ = tclient.TerminateWorkflow(context.Background(), run.ID, "", "security test: run did not end in time")
		t.Errorf("%d-byte param: run %s still going after %.0fs (%v), terminated; want failed at once", len(x), run.ID, took.Seconds(), err)
	} else {
		typ := errorType(tclient.GetWorkflow(ctx, run.ID, "").Get(ctx, nil))
		t.Logf("%d-byte param: run %s (%s) after %.1fs: %.200s", len(x), res.Status, typ, took.Seconds(), res.Error)
		if res.Status != runs.StatusFailed || typ != errtype.InvalidPipeline {
			t.Errorf("run %s (%s), want failed as %s", res.Status, typ, errtype.InvalidPipeline)
		}
		if took > 20*time.Second {
			t.Errorf("the run took %s to fail, want at once", took)
		}
	}
	if grew := after - before; grew > 50*1024 {
		t.Errorf("the worker's RSS grew by %d MB, want under 50", grew/1024)
	}
}

// procKB reads field (VmRSS, VmHWM) of process pid's status, in kB.
func procKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
