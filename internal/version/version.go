// Package version says which release of retrain a binary is and what it
// was built with: the Go toolchain and the versions of the Temporal SDK and
// server and of iceberg-go that it links, read from the binary's own build
// information (runtime/debug.ReadBuildInfo), so they cannot disagree with
// what runs.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is retrain's release (CHANGELOG.md). A release build may set it:
//
//	go build -ldflags "-X github.com/retrain-ml/retrain/internal/version.Version=0.9.1" ./cmd/retrain
var Version = "0.9.0"

// Component is a module a binary links, by the name the version text gives
// it.
type Component struct {
	Name    string // e.g. "temporal sdk"
	Path    string // module path
	Version string // as linked (after any replace directive); "" when not linked
}

// components are the modules --version reports, in its order.
var components = []Component{
	{Name: "temporal sdk", Path: "go.temporal.io/sdk"},
	{Name: "temporal server", Path: "go.temporal.io/server"},
	{Name: "iceberg-go", Path: "github.com/apache/iceberg-go"},
}

// Build is what a binary was built from.
type Build struct {
	Version    string      // retrain's release
	Go         string      // toolchain, e.g. go1.26.8
	Platform   string      // GOOS/GOARCH
	Revision   string      // VCS commit, when the build recorded one
	Modified   bool        // the tree had uncommitted changes
	Components []Component // in components' order; Version "" when the binary does not link it
}

// Read returns this binary's build information.
func Read() Build {
	b := Build{Version: Version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	linked := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.GoVersion != "" {
			b.Go = info.GoVersion
		}
		for _, m := range info.Deps {
			v := m.Version
			if m.Replace != nil && m.Replace.Version != "" {
				v = m.Replace.Version
			}
			linked[m.Path] = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	for _, c := range components {
		c.Version = linked[c.Path]
		b.Components = append(b.Components, c)
	}
	return b
}

// Text is what `NAME --version` prints: the release, then a line per
// component. A module the binary does not link (retrain-worker has no
// Temporal server) is said to be so.
func (b Build) Text(name string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s %s\n", name, b.Version)
	line := func(k, v string) { fmt.Fprintf(&s, "  %-16s %s\n", k+":", v) }
	line("go", b.Go+" "+b.Platform)
	if b.Revision != "" {
		rev := b.Revision
		if b.Modified {
			rev += " (modified)"
		}
		line("commit", rev)
	}
	for _, c := range b.Components {
		v := c.Version
		if v == "" {
			v = "not linked"
		}
		line(c.Name, v)
	}
	return s.String()
}
