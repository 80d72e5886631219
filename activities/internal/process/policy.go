package process

import (
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// AllowCommandsFlag is the worker flag that sets the programs nodes may
// start; messages name it so an operator knows where the list comes from.
const AllowCommandsFlag = "--allow-commands"

// CheckProgram refuses argv when the worker's operator allowlisted the
// programs nodes may start (allow, from the worker's --allow-commands) and
// argv[0] is not among them. An entry without a slash matches a program
// of that name wherever it lives (argv "python3" or "/usr/bin/python3");
// an absolute entry matches only that path, so "/usr/bin/python3" does
// not let a spec start ./python3 from a folder it wrote; a bare argv
// "python3" matches it when the worker's PATH finds that file, as exec
// does when it starts the program. An empty allow
// lets anything start. A refused program fails the node as BadInput, not
// retried: the worker's list does not change between attempts.
func CheckProgram(allow []string, argv []string) error {
	if len(allow) == 0 {
		return nil
	}
	if len(argv) == 0 {
		return nodetype.Permanent(errtype.BadInput, "argv is empty")
	}
	prog := argv[0]
	resolved := prog
	if !strings.Contains(prog, "/") {
		if p, err := exec.LookPath(prog); err == nil {
			resolved, _ = filepath.Abs(p)
		}
	}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
		case filepath.IsAbs(a):
			if filepath.IsAbs(resolved) && filepath.Clean(resolved) == filepath.Clean(a) {
				return nil
			}
		case prog == a || (filepath.IsAbs(prog) && filepath.Base(prog) == a):
			return nil
		}
	}
	return nodetype.Permanent(errtype.BadInput,
		"program %q is not allowed on this worker: its %s list is %s; add it there to let nodes start it",
		prog, AllowCommandsFlag, strings.Join(allow, ","))
}
