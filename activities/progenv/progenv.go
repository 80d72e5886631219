// Package progenv says what the programs nodes start may see of the
// worker: their environment (a small fixed base, the names the worker's
// operator passes on, the node's own env with secret references resolved)
// and which local paths nodes may read or write.
//
// A program does not inherit the worker's environment: a node's argv is
// chosen by whoever may start a run, and `sh -c 'echo $AWS_SECRET_ACCESS_KEY'`
// would otherwise copy the worker's credentials into node outputs, hence
// workflow history, logs and reports.
package progenv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// BaseVars are the worker's variables every program gets when they are
// set: enough to find programs and a home, and to keep locale, temp folder
// and time zone. LC_* stands for every locale category.
var BaseVars = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_*", "TMPDIR", "TZ"}

// SecretEnvPrefix names the worker variables secrets are read from:
// ${secret.NAME} is RETRAIN_SECRET_NAME. They are never passed on as
// variables, whatever the pass list says.
const SecretEnvPrefix = "RETRAIN_SECRET_"

// Policy is what the worker's operator grants programs and nodes beyond
// the base. The zero Policy passes nothing more, reads secrets from the
// environment only, and allows every path.
type Policy struct {
	// PassEnv are names of worker variables programs get too; a name
	// ending in * is a prefix (AWS_*).
	PassEnv []string
	// SecretsDir is a folder of files named after secrets (a mounted
	// Kubernetes secret, say); ${secret.NAME} reads SecretsDir/NAME when
	// RETRAIN_SECRET_NAME is unset.
	SecretsDir string
	// AllowPaths are the folders local paths in specs (checkpoint source,
	// deploy dir) must lie under; empty allows any path.
	AllowPaths []string
}

func matches(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// Base returns the worker variables a program inherits: BaseVars and the
// policy's PassEnv, in the worker's order.
func (p Policy) Base() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, SecretEnvPrefix) {
			continue
		}
		if matches(BaseVars, name) || matches(p.PassEnv, name) {
			env = append(env, kv)
		}
	}
	return env
}

var secretRe = regexp.MustCompile(`\$\{secret\.([A-Za-z0-9_]+)\}`)

// Env is a program's environment with the secrets it holds.
type Env struct {
	Vars    []string // NAME=value, to append to exec.Cmd.Env
	Secrets []string // the resolved secret values, to mask in output
}

// Resolve turns a node's env, the `with` field named field, into
// NAME=value entries (sorted, so runs are reproducible), replacing the
// ${secret.NAME} references that the spec's author wrote there (ctx
// carries where: nodetype.SecretSpans) with the secrets' values. Any other
// "${secret." in a value arrived through a param or an output and stays
// text. A secret that is missing fails the node as bad input, naming the
// secret; no error ever holds a value.
func (p Policy) Resolve(ctx context.Context, field string, env map[string]string) (Env, error) {
	var out Env
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v, used, err := p.ResolveString(ctx, dags.PointerTo(field, k), env[k])
		if err != nil {
			return Env{}, fmt.Errorf("env %s: %w", k, err)
		}
		for _, s := range used {
			if !slices.Contains(out.Secrets, s) {
				out.Secrets = append(out.Secrets, s)
			}
		}
		out.Vars = append(out.Vars, k+"="+v)
	}
	return out, nil
}

// ResolveString replaces the spec's ${secret.NAME} references in s, the
// string at path in the node's `with` (a JSON Pointer such as
// /webhooks/0), returning the secret values it used.
func (p Policy) ResolveString(ctx context.Context, path, s string) (string, []string, error) {
	spans := nodetype.SecretSpans(ctx, path)
	if nodetype.LegacySecrets(ctx) {
		spans = legacySpans(s)
	}
	if len(spans) == 0 {
		return s, nil, nil
	}
	var used []string
	out, err := dags.ResolveSecretSpans(s, spans, func(name string) (string, error) {
		v, err := p.Secret(name)
		if err == nil && v != "" && !slices.Contains(used, v) {
			used = append(used, v)
		}
		return v, err
	})
	// Noted before anything can fail, so the activity wrapper masks them
	// in whatever this attempt hands Temporal.
	nodetype.NoteSecrets(ctx, used...)
	if err != nil {
		if _, ok := errors.AsType[*temporal.ApplicationError](err); ok {
			return "", nil, err
		}
		return "", nil, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	return out, used, nil
}

// legacySpans finds every ${secret.NAME} in s: how a node scheduled by a
// worker from before secret references were recorded resolves them.
func legacySpans(s string) []dags.SecretSpan {
	var spans []dags.SecretSpan
	for _, m := range secretRe.FindAllStringSubmatchIndex(s, -1) {
		if m[0] > 0 && s[m[0]-1] == '$' {
			continue // $${...}: an escaped reference, text
		}
		spans = append(spans, dags.SecretSpan{Name: s[m[2]:m[3]], Start: m[0]})
	}
	return spans
}

// Secret returns the value of ${secret.NAME}: the worker's
// RETRAIN_SECRET_NAME, else the file NAME in SecretsDir (a trailing
// newline dropped).
func (p Policy) Secret(name string) (string, error) {
	if v, ok := os.LookupEnv(SecretEnvPrefix + name); ok {
		return v, nil
	}
	if p.SecretsDir != "" {
		b, err := os.ReadFile(filepath.Join(p.SecretsDir, name))
		if err == nil {
			return strings.TrimRight(string(b), "\r\n"), nil
		}
		if !os.IsNotExist(err) {
			return "", nodetype.Permanent(errtype.BadInput, "secret %s: cannot read it from the secrets folder: %v", name, err)
		}
	}
	where := "the worker has no " + SecretEnvPrefix + name
	if p.SecretsDir != "" {
		where += " and no file " + name + " in " + p.SecretsDir
	} else {
		where += " and no --secrets-dir"
	}
	return "", nodetype.Permanent(errtype.BadInput, "secret %s is not set: %s", name, where)
}

// CheckPath fails, as bad input that no retry fixes, when path is not
// under one of AllowPaths; field names the `with` key for the message.
func (p Policy) CheckPath(field, path string) error {
	if len(p.AllowPaths) == 0 {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nodetype.Permanent(errtype.BadInput, "%s %q: %v", field, path, err)
	}
	// Symlinks resolved where they exist, so a link cannot lead out.
	if real, err := evalExisting(abs); err == nil {
		abs = real
	}
	for _, root := range p.AllowPaths {
		r, err := filepath.Abs(root)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(r); err == nil {
			r = real
		}
		if rel, err := filepath.Rel(r, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return nil
		}
	}
	return nodetype.Permanent(errtype.BadInput, "%s %q is outside the folders this worker allows (--allow-paths %s)",
		field, path, strings.Join(p.AllowPaths, ","))
}

// evalExisting resolves symlinks in the longest existing prefix of path
// (a glob or a file still to be written has a part that does not exist).
func evalExisting(path string) (string, error) {
	dir, rest := path, ""
	for {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return path, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// Placeholders replaces each ${secret.NAME} in s with the word "secret",
// for checks of a value's shape made where secrets are not known (a
// webhook URL at validate time).
func Placeholders(s string) string {
	return secretRe.ReplaceAllString(s, "secret")
}
