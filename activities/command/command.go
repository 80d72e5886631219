package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/activities/progenv"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// Name is the command node type's name.
const Name = "command"

// CommandType is the `command` node type, for its name and schema; Type
// returns it with its run function.
var CommandType = Type(nil).NodeType

// With is a command node's `with` block.
type With struct {
	Argv        []string          `json:"argv" required:"true" doc:"program and arguments"`
	Env         map[string]string `json:"env" doc:"environment of the program, on top of PATH, HOME, locale, TMPDIR, TZ and the names the worker passes on (--pass-env); values may hold ${secret.NAME}, resolved on the worker"`
	Dir         string            `json:"dir" doc:"working directory"`
	OKExitCodes []int             `json:"ok_exit_codes" default:"[0]" doc:"exit codes that count as success"`
	OutputsFrom string            `json:"outputs_from" default:"file" doc:"where the program's structured outputs are: file (a JSON object written to the file $RETRAIN_OUTPUTS names) or stdout (a JSON object printed as the last line of stdout)"`
}

// Outputs are a command node's outputs: the three it always gives, and
// the keys the program wrote to its outputs file.
type Outputs struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"` // the last 4 KiB
	Stderr   string `json:"stderr"` // the last 4 KiB
	// Extra are the keys of the JSON object the program wrote to the file
	// $RETRAIN_OUTPUTS names (see readOutputs); they sit next to the
	// three above in the node's outputs.
	Extra map[string]any `json:"-"`
}

// MarshalJSON gives the outputs as one object, Extra's keys next to the
// fixed ones, which is what the workflow records and references read.
func (o Outputs) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(o.Extra)+3)
	for k, v := range o.Extra {
		m[k] = v
	}
	m["exit_code"], m["stdout"], m["stderr"] = o.ExitCode, o.Stdout, o.Stderr
	return json.Marshal(m)
}

// check refuses, before any run, lists that no run could use.
func check(with map[string]any) error {
	if argv, ok := with["argv"].([]any); ok && len(argv) == 0 {
		return errors.New("argv must name a program")
	}
	if codes, ok := with["ok_exit_codes"].([]any); ok && len(codes) == 0 {
		return errors.New("ok_exit_codes is empty: no exit code would count as success")
	}
	if from, ok := with["outputs_from"].(string); ok && !dags.HasRef(from) && from != OutputsFromFile && from != OutputsFromStdout {
		return fmt.Errorf("outputs_from %q: want %s or %s", from, OutputsFromFile, OutputsFromStdout)
	}
	if env, ok := with["env"].(map[string]any); ok {
		if _, set := env[OutputsEnv]; set {
			return fmt.Errorf("env sets %s, which the node sets itself to the path of the command's outputs file", OutputsEnv)
		}
	}
	return nil
}

// Command runs `command` nodes.
type Command struct {
	Logger *slog.Logger
	// AllowCommands are the programs this worker's operator lets nodes
	// start (its --allow-commands); empty allows any.
	AllowCommands []string
	// Env is what programs see of the worker: its environment and secrets.
	Env progenv.Policy
}

// Deps are what the command node type needs from its worker.
type Deps struct {
	Logger        *slog.Logger
	AllowCommands []string       // see Command.AllowCommands
	Env           progenv.Policy // see Command.Env
}

// Run starts the program in its own process group, streams its output to the
// worker log, and kills the whole group when the activity is cancelled or
// times out, so no orphaned child keeps burning a GPU after its node ended.
func (c *Command) Run(ctx context.Context, in nodetype.Input, spec With) (Outputs, error) {
	if len(spec.Argv) == 0 {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "argv is empty")
	}
	// A list from a reference is only known now; empty, it would fail
	// every run however the program exits.
	if len(spec.OKExitCodes) == 0 {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "ok_exit_codes is empty: no exit code would count as success")
	}
	if spec.OutputsFrom != OutputsFromFile && spec.OutputsFrom != OutputsFromStdout {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "outputs_from %q: want %s or %s", spec.OutputsFrom, OutputsFromFile, OutputsFromStdout)
	}
	if err := process.CheckProgram(c.AllowCommands, spec.Argv); err != nil {
		return Outputs{}, err
	}
	log := c.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)

	// A folder per attempt, so a retry never reads what a failed attempt
	// wrote. A worker that cannot make one may do better on retry.
	dir, err := os.MkdirTemp("", "retrain-outputs-")
	if err != nil {
		return Outputs{}, fmt.Errorf("outputs folder: %w", err)
	}
	defer os.RemoveAll(dir)
	outputsFile, err := filepath.Abs(filepath.Join(dir, "outputs.json"))
	if err != nil {
		return Outputs{}, fmt.Errorf("outputs folder: %w", err)
	}

	cmd, secrets, err := process.CommandEnv(ctx, in, spec.Argv, spec.Dir, c.Env, spec.Env)
	if err != nil {
		return Outputs{}, err
	}
	// Last, so it wins over an env entry of the same name (exec keeps the
	// last of duplicates); Check refuses one before the run.
	cmd.Env = append(cmd.Env, OutputsEnv+"="+outputsFile)
	stdout := process.NewTailWriter(process.OutputTail, log, "stdout").Mask(secrets)
	stderr := process.NewTailWriter(process.OutputTail, log, "stderr").Mask(secrets)
	cmd.Stdout, cmd.Stderr = stdout, stderr

	log.Info("command starting", "argv", spec.Argv)
	if err := cmd.Start(); err != nil {
		// A missing program will not appear on retry.
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "start %q: %v", spec.Argv[0], err)
	}
	waitErr := process.WaitOrKill(ctx, cmd, log)
	stdout.Flush()
	stderr.Flush()

	if ctx.Err() != nil {
		return Outputs{}, ctx.Err()
	}
	code := cmd.ProcessState.ExitCode()
	outputs := Outputs{
		ExitCode: code,
		Stdout:   strings.TrimRight(stdout.Tail(), "\n"),
		Stderr:   strings.TrimRight(stderr.Tail(), "\n"),
	}
	for _, ok := range spec.OKExitCodes {
		if code == ok {
			read := func() (map[string]any, error) { return readOutputs(outputsFile) }
			if spec.OutputsFrom == OutputsFromStdout {
				read = func() (map[string]any, error) { return stdoutOutputs(outputs.Stdout) }
			}
			extra, err := read()
			if err != nil {
				return Outputs{}, err
			}
			// A program may write a secret it was given to its outputs too.
			if len(secrets) > 0 {
				extra, _ = progenv.MaskValue(extra, secrets).(map[string]any)
			}
			outputs.Extra = extra
			log.Info("command finished", "exit_code", code, "outputs", len(extra))
			return outputs, nil
		}
	}
	if code < 0 { // killed by a signal
		return Outputs{}, fmt.Errorf("%s: %v; stderr: %s", spec.Argv[0], waitErr, process.LastLines(stderr.Tail(), 5))
	}
	return Outputs{}, fmt.Errorf("%s exited with code %d; stderr: %s", spec.Argv[0], code, process.LastLines(stderr.Tail(), 5))
}

// Type returns the command node type, allowed to start any program.
func Type(logger *slog.Logger) nodetype.Type {
	return TypeWith(Deps{Logger: logger})
}

// TypeWith returns the command node type with a worker's deps.
func TypeWith(d Deps) nodetype.Type {
	c := &Command{Logger: d.Logger, AllowCommands: d.AllowCommands, Env: d.Env}
	return nodetype.New(dags.NodeType{
		Name: Name,
		Doc: "Runs argv directly (no shell unless argv names one) and captures its exit code and output tails. " +
			"The program may write a JSON object to the file $RETRAIN_OUTPUTS names (64 KiB at most), or print one as the last line of its stdout " +
			"(outputs_from: stdout; up to 4 KiB): after a successful exit its keys " +
			"are outputs too, next to exit_code, stdout and stderr, and a spec may declare them with their types (outputs: {auc: number}).",
		Check:       check,
		OpenOutputs: true,
	}, c.Run).WithCache(cache()).OptInCache()
}
