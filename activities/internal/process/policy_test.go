package process

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
)

func TestCheckProgram(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	for _, c := range []struct {
		allow []string
		prog  string
		ok    bool
	}{
		{nil, "anything", true},
		{[]string{}, "/bin/rm", true},
		{[]string{"sh", "python3"}, "sh", true},
		{[]string{"sh", "python3"}, "/usr/bin/python3", true}, // a name matches any folder
		{[]string{"sh", "python3"}, "./python3", false},       // but not a relative path
		{[]string{"sh", "python3"}, "bin/sh", false},
		{[]string{"sh", "python3"}, "bash", false},
		{[]string{"/opt/py/bin/python3"}, "/opt/py/bin/python3", true},
		{[]string{"/opt/py/bin/python3"}, "/opt/py/bin/../bin/python3", true},
		{[]string{"/opt/py/bin/python3"}, "/usr/bin/python3", false},
		{[]string{"/opt/py/bin/python3"}, "python3-not-on-path-xyz", false},
		{[]string{sh}, "sh", true}, // a bare name found on PATH at the allowed path
		{[]string{" sh ", ""}, "sh", true},
	} {
		err := CheckProgram(c.allow, []string{c.prog, "-c", "true"})
		if (err == nil) != c.ok {
			t.Errorf("CheckProgram(%q, %q) = %v, want ok=%v", c.allow, c.prog, err, c.ok)
		}
	}
}

func TestCheckProgramMessage(t *testing.T) {
	err := CheckProgram([]string{"sh", "python3"}, []string{"curl", "http://x"})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != errtype.BadInput || !app.NonRetryable() {
		t.Fatalf("err = %v, want a non-retryable BadInput", err)
	}
	for _, want := range []string{`"curl"`, "--allow-commands", "sh,python3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not mention %s", err, want)
		}
	}
}
