package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestText(t *testing.T) {
	b := Build{
		Version: "1.2.3", Go: "go1.26.8", Platform: "linux/amd64", Revision: "3e1ed3c", Modified: true,
		Components: []Component{
			{Name: "temporal sdk", Path: "go.temporal.io/sdk", Version: "v1.50.0"},
			{Name: "temporal server", Path: "go.temporal.io/server"},
		},
	}
	want := "retrain-worker 1.2.3\n" +
		"  go:              go1.26.8 linux/amd64\n" +
		"  commit:          3e1ed3c (modified)\n" +
		"  temporal sdk:    v1.50.0\n" +
		"  temporal server: not linked\n"
	if got := b.Text("retrain-worker"); got != want {
		t.Errorf("Text:\n%s\nwant:\n%s", got, want)
	}
}

// TestRead: this test binary links none of the components, so each is
// reported as not linked, in order; the toolchain is the one running.
func TestRead(t *testing.T) {
	b := Read()
	if b.Version != Version || b.Go != runtime.Version() {
		t.Errorf("Read: version %q, go %q; want %q, %q", b.Version, b.Go, Version, runtime.Version())
	}
	var names []string
	for _, c := range b.Components {
		names = append(names, c.Name)
		if c.Version != "" {
			t.Errorf("%s: %q, but this test binary does not link it", c.Path, c.Version)
		}
	}
	if got := strings.Join(names, ", "); got != "temporal sdk, temporal server, iceberg-go" {
		t.Errorf("components %s", got)
	}
}
