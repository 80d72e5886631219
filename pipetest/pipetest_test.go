package pipetest

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
)

const miniPipeline = `name: mini
params:
  threshold: {type: number, default: 0.7}
defaults:
  retry: {max_attempts: 3, initial_interval: 1m}
nodes:
  - id: train
    type: command
    with: {argv: [python3, train.py]}
    outputs: {auc: number, model: string}
  - id: gate
    type: gate
    needs: [train]
    with:
      candidate: {auc: "${nodes.train.outputs.auc}"}
      metrics: {auc: {direction: higher_is_better, min: "${params.threshold}"}}
      wait_for_approval: 48h
    timeout: 72h
  - id: deploy
    type: deploy
    needs: [gate]
    when: ${nodes.gate.outputs.passed}
    with: {model: mini, dir: "${nodes.train.outputs.model}"}
`

// suite writes the mini pipeline and a test file beside it and runs it.
func suite(t *testing.T, tests string) (*Report, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mini.yaml"), []byte(miniPipeline), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mini.test.yaml")
	if err := os.WriteFile(path, []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep := r.RunFiles(context.Background(), []string{path}, &out)
	return rep, out.String()
}

func mustContain(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestUnstubbedNodeFailsNamingIt(t *testing.T) {
	rep, out := suite(t, `cases:
  - name: deploy left unstubbed
    stubs:
      train: {outputs: {auc: 0.9, model: /m}}
      gate: run
    expect: {status: succeeded}
`)
	if rep.Failed() != 1 {
		t.Fatalf("failed %d, want 1:\n%s", rep.Failed(), out)
	}
	mustContain(t, out, "FAIL ", "node deploy (type deploy) has no stub", "run: status failed, want succeeded", "✗ deploy")
}

func TestStubOutputsMustMatchTheNode(t *testing.T) {
	for name, tc := range map[string]struct{ stub, want string }{
		"misspelt":     {"{outputs: {acu: 0.9, model: /m}}", `mini.test.yaml:4:25: case "c": stub train (type command): output acu: node train has no output acu (did you mean "auc"?)`},
		"wrong type":   {`{outputs: {auc: high, model: /m}}`, `output auc is a string ("high"), want number`},
		"missing":      {`{outputs: {model: /m}}`, "output auc is missing, want number"},
		"closed type":  {"", ""},
		"typed output": {"", ""},
		"unknown node": {"", ""},
	} {
		t.Run(name, func(t *testing.T) {
			stubs := "      train: " + tc.stub + "\n"
			switch name {
			case "closed type":
				stubs = "      train: {outputs: {auc: 0.9, model: /m}}\n      gate: {outputs: {passd: true}}\n"
				tc.want = `mini.test.yaml:5:24: case "c": stub gate (type gate): output passd: node gate has no output passd (did you mean "passed"?)`
			case "typed output":
				stubs = "      train: {outputs: {auc: 0.9, model: /m}}\n      gate: {outputs: {passed: \"yes\", reason: ok}}\n"
				tc.want = `mini.test.yaml:5:24: case "c": stub gate (type gate): output passed is a string ("yes"), want bool (type gate's output)`
			case "unknown node":
				stubs = "      trian: {outputs: {auc: 0.9, model: /m}}\n"
				tc.want = `mini.test.yaml:4:7: case "c": stub for node trian: pipeline mini has no node trian (did you mean "train"?)`
			}
			rep, out := suite(t, "cases:\n  - name: c\n    stubs:\n"+stubs+"    expect: {status: succeeded}\n")
			if rep.Failed() != 1 || rep.Cases() != 0 {
				t.Fatalf("want the file refused, no case run:\n%s", out)
			}
			mustContain(t, out, tc.want)
		})
	}
}

func TestBadReferencesInTheTestFile(t *testing.T) {
	_, out := suite(t, `pipeline: minni
cases:
  - name: c
    expect: {status: succeeded}
`)
	mustContain(t, out, `mini.test.yaml:1:11: pipeline "minni" not found`)
	_, out = suite(t, `cases:
  - name: c
    params: {treshold: 1}
    stubs:
      deploy: run
    expect:
      nodes:
        gate: {outputs: {passd: true}}
        deplyo: succeeded
`)
	mustContain(t, out,
		`mini.test.yaml:3:14: case "c": params.treshold: pipeline mini has no param treshold (did you mean "threshold"?)`,
		`mini.test.yaml:5:7: case "c": stub deploy (type deploy): run: true runs only command, gate, noop nodes`,
		`case "c": expect.nodes.gate: output passd: node gate has no output passd (did you mean "passed"?)`,
		`mini.test.yaml:9:9: case "c": expect.nodes deplyo: pipeline mini has no node deplyo (did you mean "deploy"?)`)
}

func TestExpectationsThatDoNotMatchFail(t *testing.T) {
	rep, out := suite(t, `cases:
  - name: wrong
    stubs:
      train: {outputs: {auc: 0.9, model: /m}}
      gate: run
      deploy: {outputs: {version: v1}}
    expect:
      status: succeeded
      nodes:
        deploy: {status: skipped, with: {dir: /other}}
        gate: {outputs: {passed: false}}
        train: {attempts: 2}
`)
	if rep.Failed() != 1 {
		t.Fatalf("want the case failed:\n%s", out)
	}
	mustContain(t, out,
		"node deploy: status succeeded, want skipped",
		`node deploy: with.dir is "/m", want "/other"`,
		"node gate: outputs.passed is true, want false",
		"node train: 1 attempts, want 2",
		"✗ deploy  skipped")
}

func TestApprovalWaitsAndTheRunTimeLimit(t *testing.T) {
	rep, out := suite(t, `cases:
  - name: approved two hours into the wait
    stubs:
      train: {outputs: {auc: 0.5, model: /m}}
      gate: {run: true, approve: {after: 2h, by: alice, reason: "label delay"}}
      deploy: {outputs: {version: v2}}
    expect:
      status: succeeded
      nodes:
        gate: {outputs: {passed: true, forced: true, forced_by: "claimed by alice"}}
        deploy: succeeded
  - name: nobody approves within the case's timeout
    timeout: 1h
    stubs:
      train: {outputs: {auc: 0.5, model: /m}}
      gate: run
    expect: {status: succeeded}
`)
	if rep.Failed() != 1 {
		t.Fatalf("want one case failed:\n%s", out)
	}
	mustContain(t, out, "PASS ", "approved two hours into the wait", "run time 2h0m",
		"FAIL ", "the run took longer than the case's timeout of 1h0m0s: waiting on node gate (running)")
}

func TestRetriesAndErrorTypes(t *testing.T) {
	rep, out := suite(t, `cases:
  - name: permanent failure is not retried
    stubs:
      train: {error: {type: BadData, message: "no rows", retryable: false}}
    expect:
      status: failed
      error_type: BadData
      nodes:
        train: {status: failed, attempts: 1, error_type: BadData, error: "no rows"}
        gate: cancelled
  - name: two failures then outputs, after backoffs of a minute each
    stubs:
      train:
        attempts:
          - error: flaky
          - error: flaky
          - outputs: {auc: 0.9, model: /m}
      gate: run
      deploy: {outputs: {}}
    expect:
      status: succeeded
      nodes:
        train: {attempts: 3}
`)
	if rep.Failed() != 0 {
		t.Fatalf("want both cases passed:\n%s", out)
	}
	mustContain(t, out, "run time 2m0s") // 1m, then 2m capped by the default max_interval of 1m
}

func TestJUnit(t *testing.T) {
	rep, _ := suite(t, `cases:
  - name: passes
    stubs:
      train: {outputs: {auc: 0.5, model: /m}}
      gate: {run: true, approve: {after: 1m}}
      deploy: {outputs: {}}
    expect: {status: succeeded}
  - name: fails
    stubs:
      train: {outputs: {auc: 0.9, model: /m}}
    expect: {status: succeeded}
`)
	var b bytes.Buffer
	if err := WriteJUnit(&b, rep); err != nil {
		t.Fatal(err)
	}
	var got junitSuites
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if got.Tests != 2 || got.Fails != 1 || len(got.Suites) != 1 || got.Suites[0].Cases[1].Failure == nil || got.Suites[0].Cases[0].Failure != nil {
		t.Fatalf("junit:\n%s", b.String())
	}
	if !strings.Contains(got.Suites[0].Cases[1].Failure.Text, "node gate (type gate) has no stub") {
		t.Errorf("failure text: %s", got.Suites[0].Cases[1].Failure.Text)
	}
}

// A team's own node type is stubbed like a built-in one, its outputs
// checked against its outputs struct.
func TestCustomNodeTypes(t *testing.T) {
	type with struct {
		URL string `json:"url" required:"true"`
	}
	type outputs struct {
		Status int  `json:"status"`
		OK     bool `json:"ok"`
	}
	probe := nodetype.New(dags.NodeType{Name: "probe", Doc: "probe a URL"}, func(context.Context, nodetype.Input, with) (outputs, error) {
		t.Error("the probe ran for real")
		return outputs{}, nil
	})
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("check.yaml", "name: check\nnodes:\n  - {id: probe, type: probe, with: {url: 'http://x'}}\n")
	r, err := NewRunner(Options{NodeTypes: []nodetype.Type{probe}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep := r.RunFiles(context.Background(), []string{write("check.test.yaml", `cases:
  - name: up
    stubs: {probe: {outputs: {status: 200, ok: true}}}
    expect: {status: succeeded, nodes: {probe: {outputs: {ok: true}}}}
`)}, &out)
	if rep.Failed() != 0 {
		t.Fatalf("want passed:\n%s", out.String())
	}
	out.Reset()
	r.RunFiles(context.Background(), []string{write("check.test.yaml", `cases:
  - name: typo
    stubs: {probe: {outputs: {status: "200", okk: true}}}
    expect: {status: succeeded}
`)}, &out)
	mustContain(t, out.String(), `output okk: node probe has no output okk (did you mean "ok"?)`, `output status is a string ("200"), want int (type probe's output)`)
}

// An approval the gate never waited for fails the case: the case meant
// to exercise a wait that did not happen.
func TestAnApprovalNobodyWaitedForFails(t *testing.T) {
	rep, out := suite(t, `cases:
  - name: the gate passed at once
    stubs:
      train: {outputs: {auc: 0.9, model: /m}}
      gate: {run: true, approve: {after: 1m}}
      deploy: {outputs: {}}
    expect: {status: succeeded}
`)
	if rep.Failed() != 1 {
		t.Fatalf("want the case failed:\n%s", out)
	}
	mustContain(t, out, "node gate: the stubbed approve (1m0s in) never came: the node had ended before, not waiting for it")
}

// A command that runs for real and hangs fails its case at the
// wall-clock limit, naming it, and the next case runs.
func TestWallClockLimit(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hang.yaml"), []byte("name: hang\nnodes:\n  - {id: slow, type: command, with: {argv: [sleep, '20']}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "hang.test.yaml")
	if err := os.WriteFile(path, []byte(`cases:
  - {name: hangs, stubs: {slow: run}, expect: {status: succeeded}}
  - {name: stubbed, stubs: {slow: {outputs: {}}}, expect: {status: succeeded}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Options{WallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	started := time.Now()
	rep := r.RunFiles(context.Background(), []string{path}, &out)
	if rep.Failed() != 1 || rep.Cases() != 2 || time.Since(started) > 15*time.Second {
		t.Fatalf("want 1 of 2 failed, promptly:\n%s", out.String())
	}
	mustContain(t, out.String(), "the case ran longer than 1s of wall-clock time: waiting on node slow (running)", "PASS ")
}
