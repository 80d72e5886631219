package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestModelWebhooksRefusedBeforeTheStore: bad webhooks and flag mixes
// fail naming the problem before any store is opened (there is none
// here: opening one would fail differently).
func TestModelWebhooksRefusedBeforeTheStore(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ctr", "http://${secret.HOST}/reload"}, "a secret may not be in the host"},
		{[]string{"ctr", "ftp://serving/reload"}, "is not an http(s) URL"},
		{[]string{"ctr", "http://serving/reload", "--attempts", "0"}, "attempts must be 1 to 10"},
		{[]string{"ctr", "http://serving/reload", "--clear"}, "not both"},
		{[]string{"../ctr", "http://serving/reload"}, "model name"},
	} {
		var out bytes.Buffer
		app := &App{Out: &out, Err: &out, LogLevel: "warn"}
		cmd := NewModelCommand(app)
		cmd.SetArgs(append([]string{"webhooks", "--s3-uri", "s3://unreachable/x", "--s3-endpoint", "http://127.0.0.1:1"}, c.args...))
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("webhooks %v: %v, want %q", c.args, err, c.want)
		}
	}
}
