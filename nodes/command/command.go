package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/retrain-ml/retrain/nodes/internal/process"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// CommandType is the `command` node type: run a program.
var CommandType = dags.NodeType{
	Name: "command",
	Doc:  "Runs argv directly (no shell unless argv names one) and captures its exit code and output tails.",
	Fields: []dags.Field{
		{Name: "argv", Type: dags.FieldStringList, Required: true, Doc: "program and arguments"},
		{Name: "env", Type: dags.FieldStringMap, Doc: "extra environment; the worker's environment is inherited"},
		{Name: "dir", Type: dags.FieldString, Doc: "working directory"},
		{Name: "ok_exit_codes", Type: dags.FieldIntList, Doc: "exit codes that count as success (default [0])"},
	},
	Outputs: []string{"exit_code", "stdout", "stderr"},
	Check: func(with map[string]any) error {
		if argv, ok := with["argv"].([]any); ok && len(argv) == 0 {
			return errors.New("argv must name a program")
		}
		return nil
	},
}

// Command runs `command` nodes.
type Command struct {
	Logger *slog.Logger
}

type commandSpec struct {
	Argv        []string          `json:"argv"`
	Env         map[string]string `json:"env"`
	Dir         string            `json:"dir"`
	OKExitCodes []int             `json:"ok_exit_codes"`
}

// Run starts the program in its own process group, streams its output to the
// worker log, and kills the whole group when the activity is cancelled or
// times out, so no orphaned child keeps burning a GPU after its node ended.
func (c *Command) Run(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	var spec commandSpec
	if err := nodetype.Decode(in.With, &spec); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if len(spec.Argv) == 0 {
		return nil, nodetype.Permanent(errtype.BadInput, "argv is empty")
	}
	okCodes := spec.OKExitCodes
	if len(okCodes) == 0 {
		okCodes = []int{0}
	}
	log := c.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)

	cmd := process.Command(in, spec.Argv, spec.Dir, spec.Env)
	stdout := process.NewTailWriter(process.OutputTail, log, "stdout")
	stderr := process.NewTailWriter(process.OutputTail, log, "stderr")
	cmd.Stdout, cmd.Stderr = stdout, stderr

	log.Info("command starting", "argv", spec.Argv)
	if err := cmd.Start(); err != nil {
		// A missing program will not appear on retry.
		return nil, nodetype.Permanent(errtype.BadInput, "start %q: %v", spec.Argv[0], err)
	}
	waitErr := process.WaitOrKill(ctx, cmd, log)
	stdout.Flush()
	stderr.Flush()

	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	code := cmd.ProcessState.ExitCode()
	outputs := map[string]any{
		"exit_code": code,
		"stdout":    strings.TrimRight(stdout.Tail(), "\n"),
		"stderr":    strings.TrimRight(stderr.Tail(), "\n"),
	}
	for _, ok := range okCodes {
		if code == ok {
			log.Info("command finished", "exit_code", code)
			return outputs, nil
		}
	}
	if code < 0 { // killed by a signal
		return nil, fmt.Errorf("%s: %v; stderr: %s", spec.Argv[0], waitErr, process.LastLines(stderr.Tail(), 5))
	}
	return nil, fmt.Errorf("%s exited with code %d; stderr: %s", spec.Argv[0], code, process.LastLines(stderr.Tail(), 5))
}

// Type returns the command node type.
func Type(logger *slog.Logger) nodetype.Type {
	c := &Command{Logger: logger}
	return nodetype.Type{NodeType: CommandType, Run: c.Run}
}
