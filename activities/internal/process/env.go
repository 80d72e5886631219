package process

import (
	"context"
	"os/exec"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/nodetype"
)

// CommandEnv builds the process a node runs: argv in dir, in its own
// process group (so WaitOrKill can end all of it), under the worker's
// policy: the program gets the policy's base environment (progenv.BaseVars and the --pass-env names),
// the RETRAIN_* variables naming the node, and env with its
// ${secret.NAME} references resolved. It returns the secret values used,
// for the node's TailWriters to mask (TailWriter.Mask); a missing secret
// is a permanent bad-input error naming it.
func CommandEnv(ctx context.Context, in nodetype.Input, argv []string, dir string, policy progenv.Policy, env map[string]string) (*exec.Cmd, []string, error) {
	resolved, err := policy.Resolve(ctx, "env", env)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(policy.Base(),
		"RETRAIN_PIPELINE="+in.Pipeline, "RETRAIN_RUN_ID="+in.RunID, "RETRAIN_NODE="+in.Node)
	cmd.Env = append(cmd.Env, resolved.Vars...)
	SetProcessGroup(cmd)
	return cmd, resolved.Secrets, nil
}

// Mask makes w write *** in place of each of secrets in the lines it
// logs and in its tail, so a program that prints a secret it was given
// does not put it into node outputs, history, logs or error messages.
// It masks what progenv.MaskString does: a line of a multi-line secret
// too (w logs line by line, so the whole value never appears in one
// logged line), and the secret's %q, JSON and URL-escaped forms.
// Call it before the first Write.
func (w *TailWriter) Mask(secrets []string) *TailWriter {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := progenv.NewMasker(secrets); !m.Empty() {
		w.mask = m
		w.maskLen = m.Longest()
	}
	return w
}

// maskedTail is Tail with the secrets masked. Once the buffer has lost
// its start, a secret may have been cut there, leaving an unmasked piece
// of it; the first maskLen bytes are dropped to be sure (the buffer keeps
// that much more than the tail for this).
func (w *TailWriter) maskedTail() string {
	m := w.mask.String(string(w.buf))
	if w.trimmed {
		m = m[min(w.maskLen, len(m)):]
	}
	if len(m) > w.n {
		m = m[len(m)-w.n:]
	}
	return m
}
