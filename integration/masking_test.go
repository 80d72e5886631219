package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/internal/cli"
	"github.com/retrain-ml/retrain/runs"
)

// TestMultiLineSecretMaskedEverywhere: a
// multi-line secret that a step prints raw (logged line by line),
// JSON-escaped and Python-quoted, writes to its outputs in both forms and
// quotes in the stderr its failure message carries, is in none of the
// server's database files, the worker's log or the run's report, while a
// marker printed next to it is.
func TestMultiLineSecretMaskedEverywhere(t *testing.T) {
	line1, line2, marker := randomValue(t, "l1-"), randomValue(t, "l2-"), randomValue(t, "marker-")
	t.Setenv("RETRAIN_SECRET_IT_MULTI", line1+"\n"+line2+"\n}")

	queue, logPath, stopWorker := startLoggedWorker(t)

	res := runSpec(t, queue, `
name: multisecret
nodes:
  - id: show
    type: command
    with:
      env: {TOKEN: "${secret.IT_MULTI}"}
      argv:
        - python3
        - -c
        - |
          import json, os
          t = os.environ["TOKEN"]
          print("`+marker+`")
          print(t)
          print(json.dumps({"t": t}), repr(t))
          open(os.environ["RETRAIN_OUTPUTS"], "w").write(json.dumps({"t": t, "q": repr(t), "m": "`+marker+`"}))
  - id: fail
    type: command
    needs: [show]
    retry: {max_attempts: 1}
    with:
      env: {TOKEN: "${secret.IT_MULTI}"}
      argv:
        - python3
        - -c
        - |
          import json, os, sys
          print("bad token", repr(os.environ["TOKEN"]), json.dumps(os.environ["TOKEN"]), file=sys.stderr)
          sys.exit(3)
`, nil)
	wantStatus(t, res, runs.StatusFailed)
	if q := node(t, res, "show").Outputs["q"]; q != "'***'" {
		t.Errorf("show outputs q = %v, want '***'", q)
	}
	if e := node(t, res, "fail").Error; !strings.Contains(e, "bad token '***' \"***\"") {
		t.Errorf("fail error %q", e)
	}

	reportPath := filepath.Join(t.TempDir(), "report.html")
	if err := cli.WriteRunReport(context.Background(), tclient, nil, res, reportPath, cli.ReportLinks{}); err != nil {
		t.Fatal(err)
	}
	stopWorker()

	dbFiles := databaseFilesWith(t, marker)
	for _, f := range append([]string{logPath, reportPath}, dbFiles...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Each line is random hex: every escaped form holds it as it is.
		for _, v := range []string{line1, line2} {
			if n := bytes.Count(b, []byte(v)); n > 0 {
				t.Errorf("%s: %d occurrences of a line of the secret", f, n)
			}
		}
	}
	if b, _ := os.ReadFile(logPath); !bytes.Contains(b, []byte(marker)) {
		t.Errorf("the worker log has no marker: the grep would prove nothing")
	}
}
