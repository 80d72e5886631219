package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// OutputsEnv is the environment variable that gives the program the path of
// its outputs file: a JSON object whose keys become the node's outputs.
const OutputsEnv = "RETRAIN_OUTPUTS"

// MaxOutputsFile is the most the outputs file may hold, in bytes. Outputs
// are recorded in the run's history, where a payload is at most 2 MB, and
// every later node's input copies the outputs it refers to: a result larger
// than this belongs in a file or the object store, its path in the outputs.
const MaxOutputsFile = 64 << 10

// Where a command's structured outputs come from (outputs_from).
const (
	OutputsFromFile   = "file"   // the file $RETRAIN_OUTPUTS names
	OutputsFromStdout = "stdout" // the last line of stdout, a JSON object
)

// stdoutOutputs reads the outputs a program printed as the last line of
// its stdout, given the stdout's tail (process.OutputTail bytes): a
// trainer that prints its result needs no wrapper to write a file.
func stdoutOutputs(tail string) (map[string]any, error) {
	const what = "the last line of stdout (outputs_from: stdout)"
	tail = strings.TrimRight(tail, " \t\r\n")
	line := tail[strings.LastIndexByte(tail, '\n')+1:]
	if !strings.Contains(tail, "\n") && len(tail) >= process.OutputTail-1 {
		return nil, nodetype.Permanent(errtype.BadOutput, "%s is longer than the %d bytes of stdout kept; "+
			"write a result that large to the file $%s names", what, process.OutputTail, OutputsEnv)
	}
	if strings.TrimSpace(line) == "" {
		return nil, nodetype.Permanent(errtype.BadOutput, `%s: the program printed nothing; print a JSON object such as {"auc": 0.71} last`, what)
	}
	return parseOutputs([]byte(line), what)
}

// fixedOutputs are the keys the node gives itself, which the file cannot
// set.
var fixedOutputs = []string{"exit_code", "stdout", "stderr"}

// readOutputs reads the outputs file the program may have written at path:
// none (no file, or only whitespace) gives nil. Anything else that is not a
// JSON object of at most MaxOutputsFile bytes whose keys are valid output
// names other than the fixed ones fails the node without retry: the same
// program would write the same file.
func readOutputs(path string) (map[string]any, error) {
	const what = "the outputs file ($" + OutputsEnv + ")"
	bad := func(format string, args ...any) error {
		// The run names the node in front of the error; saying it again here
		// would stutter ("node score: node score: ...").
		return nodetype.Permanent(errtype.BadOutput, "%s %s", what, fmt.Sprintf(format, args...))
	}
	// Stat before opening: opening a named pipe would wait for a writer
	// that has exited.
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	switch {
	case err != nil:
		return nil, bad("cannot be read: %v", err)
	case info.IsDir():
		return nil, bad("is a folder, not a file")
	case !info.Mode().IsRegular():
		return nil, bad("is not a regular file (mode %s)", info.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, bad("cannot be read: %v", err)
	}
	defer f.Close()
	// Read one byte past the cap, never the whole of a huge file.
	b, err := io.ReadAll(io.LimitReader(f, MaxOutputsFile+1))
	if err != nil {
		return nil, bad("cannot be read: %v", err)
	}
	if len(b) > MaxOutputsFile {
		size := max(info.Size(), int64(len(b)))
		return nil, bad("is %d bytes; the cap is %d bytes (64 KiB), as outputs are recorded in the run's history: "+
			"write a large result to a file or the object store and output its path", size, MaxOutputsFile)
	}
	return parseOutputs(b, what)
}

// parseOutputs reads the program's outputs, b, from where what says:
// nothing (only whitespace) gives nil; anything but a JSON object whose
// keys are valid output names other than the fixed ones fails the node
// without retry.
func parseOutputs(b []byte, what string) (map[string]any, error) {
	bad := func(format string, args ...any) error {
		return nodetype.Permanent(errtype.BadOutput, "%s %s", what, fmt.Sprintf(format, args...))
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := lineCol(b, syn.Offset)
			return nil, bad("is not JSON: line %d, column %d: %v", line, col, err)
		}
		return nil, bad("is not JSON: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, bad(`holds %s, want a JSON object such as {"auc": 0.71}`, describe(v))
	}
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		switch {
		case slices.Contains(fixedOutputs, k):
			problems = append(problems, fmt.Sprintf("sets %q, an output the command node gives itself (%s); use another key", k, strings.Join(fixedOutputs, ", ")))
		case !dags.ValidOutputName(k):
			problems = append(problems, fmt.Sprintf("has key %q, which is not a valid output name: %s", k, dags.OutputNameRule))
		}
	}
	if len(problems) > 0 {
		return nil, bad("%s", strings.Join(problems, "; "))
	}
	return obj, nil
}

// lineCol is the 1-based line and column (in bytes) of the byte a JSON
// syntax error's offset points just past: the offending one.
func lineCol(b []byte, offset int64) (line, col int) {
	i := int(min(max(offset-1, 0), int64(len(b))))
	before := b[:i]
	return bytes.Count(before, []byte("\n")) + 1, i - bytes.LastIndexByte(before, '\n')
}

// describe names a JSON value that is not an object: its kind and, shortened,
// its text.
func describe(v any) string {
	var kind string
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		kind = "a list"
	case string:
		kind = "a string"
	case bool:
		kind = "a bool"
	case float64:
		kind = "a number"
	default:
		kind = fmt.Sprintf("a %T", v)
	}
	var text string
	if s, ok := v.(string); ok {
		text = strconv.Quote(s)
	} else {
		b, _ := json.Marshal(v)
		text = string(b)
	}
	const maxLen = 60
	if len(text) > maxLen {
		text = strings.ToValidUTF8(text[:maxLen], "") + "..."
	}
	return kind + " (" + text + ")"
}
