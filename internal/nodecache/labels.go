package nodecache

import (
	"regexp"
)

// paramRef is a `with` value that is exactly one param reference.
var paramRef = regexp.MustCompile(`^"\$\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}"$`)

// Labels names the paths of a node's `with` as written (before its
// references are resolved) whose value is exactly ${params.NAME}: a
// change there reads "param NAME 2 -> 3" rather than "with.epochs 2 -> 3".
func Labels(raw map[string]any) map[string]string {
	out := map[string]string{}
	for path, v := range Flatten(raw) {
		if m := paramRef.FindStringSubmatch(v); m != nil {
			out[path] = "param " + m[1]
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
