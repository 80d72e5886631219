package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/internal/redact"
	"github.com/retrain-ml/retrain/internal/version"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/workflows"
)

// A worker's policy is what of its configuration changes what a run does
// when this worker, rather than another one of its queue, takes the run's
// tasks: whether it accepts inline specs, which pipelines it knows, which
// programs and paths it allows, which secrets it can read, where reports,
// checkpoints, models and tables live. Workers on one queue are meant to
// share it; each publishes a digest of it (peers.go) and warns of workers
// of its queue that run under another.
//
// The digest holds one short hash per field, so that two workers can say
// which fields differ without either publishing a value: lists of programs
// or paths, URLs and the names of secrets are hashed, and secret values,
// credentials and a URI's user and password are never part of it.

// Policy fields, by the name messages give them.
const (
	fieldVersion     = "version"
	fieldNodeTypes   = "node_types"
	fieldInline      = workflows.PolicyInlineSpecs
	fieldPipelines   = workflows.PolicyPipelines
	fieldCommands    = "allow_commands"
	fieldTrusted     = "trusted_queues"
	fieldPaths       = "allow_paths"
	fieldPassEnv     = "pass_env"
	fieldSecrets     = "secrets"
	fieldReportURL   = "report_url"
	fieldObjectStore = "object_store"
	fieldLake        = "lake"
)

// policyFields lists the fields in the order messages give them, each with
// what sets it.
var policyFields = []struct{ name, setBy string }{
	{fieldInline, "--allow-inline-specs"},
	{fieldPipelines, "--pipelines (the folder's files)"},
	{fieldCommands, "--allow-commands"},
	{fieldTrusted, "--trusted-queues"},
	{fieldPaths, "--allow-paths"},
	{fieldPassEnv, "--pass-env"},
	{fieldSecrets, "--secrets-dir and RETRAIN_SECRET_* (the names of the secrets)"},
	{fieldReportURL, "--report-url"},
	{fieldObjectStore, "--s3-uri, --s3-endpoint"},
	{fieldLake, "--catalog-type, --catalog-uri, --warehouse, --s3-endpoint"},
	{fieldNodeTypes, "the node types the worker binary registers"},
	{fieldVersion, "the retrain version"},
}

// setBy says what sets field, for messages.
func setBy(field string) string {
	for _, f := range policyFields {
		if f.name == field {
			return f.setBy
		}
	}
	return field
}

// Tokens of a field whose value is not hashed.
const (
	tokenOn    = "on"
	tokenOff   = "off"
	tokenUnset = "-" // an empty list or value: for allow lists, "any"
)

// policy is a worker's policy: field name -> token.
type policy map[string]string

// policyOf computes the policy of a worker of cfg (with its defaults
// applied: trusted is the effective list of trusted queues) and node
// types.
func policyOf(cfg Config, trusted []string, types []nodetype.Type) policy {
	p := policy{
		fieldVersion:     hashToken(version.Version),
		fieldNodeTypes:   hashToken(nodeTypeNames(types)...),
		fieldInline:      boolToken(cfg.AllowInlineSpecs),
		fieldPipelines:   pipelinesToken(cfg),
		fieldCommands:    setToken(cfg.AllowCommands),
		fieldTrusted:     setToken(trusted),
		fieldPaths:       setToken(cleanPaths(cfg.Env.AllowPaths)),
		fieldPassEnv:     setToken(cfg.Env.PassEnv),
		fieldSecrets:     setToken(secretNames(cfg.Env)),
		fieldReportURL:   hashToken(cfg.ReportURL),
		fieldObjectStore: hashToken(cfg.Store.S3.URI, cfg.Store.S3.Endpoint, absOrEmpty(cfg.Store.DataDir)),
		fieldLake: hashToken(cfg.Lake.Type, cfg.Lake.Name, withoutUserinfo(cfg.Lake.URI), withoutUserinfo(cfg.Lake.Warehouse),
			cfg.Lake.S3.Endpoint, absOrEmpty(cfg.Lake.DataDir)),
	}
	return p
}

// digest is one hash of the whole policy, for logs.
func (p policy) digest() string {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range p {
			if !yield(k) {
				return
			}
		}
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+p[k])
	}
	return hash(parts...)
}

// diff lists, in policyFields order, the fields whose tokens differ
// between p and other. A field only one of them has (another retrain
// version's) is not compared: the version field tells that apart.
func (p policy) diff(other policy) []string {
	var out []string
	for _, f := range policyFields {
		a, okA := p[f.name]
		b, okB := other[f.name]
		if okA && okB && a != b {
			out = append(out, f.name)
		}
	}
	return out
}

func boolToken(b bool) string {
	if b {
		return tokenOn
	}
	return tokenOff
}

// hashToken hashes values (in order); all empty is tokenUnset.
func hashToken(values ...string) string {
	if !slices.ContainsFunc(values, func(v string) bool { return v != "" }) {
		return tokenUnset
	}
	return hash(values...)
}

// setToken hashes a list whose order does not matter.
func setToken(values []string) string {
	var vs []string
	for _, v := range values {
		if v = strings.TrimSpace(v); v != "" {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return hashToken(slices.Compact(vs)...)
}

// hash is the first 8 bytes of the SHA-256 of values, each length-prefixed
// so that no two lists hash alike by their joints.
func hash(values ...string) string {
	h := sha256.New()
	for _, v := range values {
		h.Write([]byte{byte(len(v) >> 24), byte(len(v) >> 16), byte(len(v) >> 8), byte(len(v))})
		h.Write([]byte(v))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

func nodeTypeNames(types []nodetype.Type) []string {
	names := make([]string, 0, len(types))
	for _, t := range types {
		names = append(names, t.NodeType.Name+"="+t.TargetName())
	}
	slices.Sort(names)
	return names
}

// pipelinesToken hashes the pipeline files the worker knows as they are
// at its start (the library reads them again on every run: an edit after
// the start is not in the digest). Where they cannot be read, the folder's
// path stands for them.
func pipelinesToken(cfg Config) string {
	fsys := cfg.Pipelines
	if cfg.PipelinesDir != "" {
		fsys = os.DirFS(cfg.PipelinesDir)
	}
	if fsys == nil {
		return tokenUnset
	}
	files, err := pipelineFiles(fsys)
	if err != nil {
		return hashToken("path", absOrEmpty(cfg.PipelinesDir))
	}
	return hash(files...)
}

// pipelineFiles returns name, content, name, content... of the files a
// dags.Library reads: *.yaml and *.yml at the top, not hidden, not test
// files.
func pipelineFiles(fsys fs.FS) ([]string, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	out := []string{"files"} // an empty folder is not "no folder"
	for _, e := range entries {
		name := e.Name()
		ext := path.Ext(name)
		if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") || dags.IsTestFile(name) {
			continue
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, name, string(data))
	}
	return out, nil
}

// secretNames are the names of the secrets a step can read on this
// worker: RETRAIN_SECRET_* variables and the files of the secrets folder.
// Names only: values are never read here.
func secretNames(env progenv.Policy) []string {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if s, ok := strings.CutPrefix(name, progenv.SecretEnvPrefix); ok && s != "" {
			names = append(names, s)
		}
	}
	if env.SecretsDir != "" {
		entries, err := os.ReadDir(env.SecretsDir)
		if err != nil {
			names = append(names, "(unreadable folder)")
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") { // Kubernetes' ..data links
				names = append(names, e.Name())
			}
		}
	}
	return names
}

func cleanPaths(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, absOrEmpty(p))
		}
	}
	return out
}

func absOrEmpty(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return filepath.Clean(abs)
	}
	return p
}

// withoutUserinfo drops a URI's user, password and query (where
// credentials go) before it is hashed; what it cannot read as a URL
// (a key=value DSN) loses its credentials by redact.URI.
func withoutUserinfo(uri string) string {
	uri = redact.URI(uri)
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		// Not a URL with a host: keep what follows any credentials.
		uri, _, _ = strings.Cut(uri, "?")
		if i := strings.LastIndex(uri, "@"); i >= 0 {
			return uri[i+1:]
		}
		return uri
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}

// The published form: the policy rides in the Temporal identity of a
// poller of the queue's policy queue (peers.go), as
// "BASE-IDENTITY;retrain-policy=1;field=token;...".
const policyMarker = "retrain-policy=1"

// encodeIdentity is the identity a worker whose identity is base and
// whose policy is p publishes.
func encodeIdentity(base string, p policy) string {
	parts := []string{base, policyMarker}
	for _, f := range policyFields {
		if tok, ok := p[f.name]; ok {
			parts = append(parts, f.name+"="+tok)
		}
	}
	return strings.Join(parts, ";")
}

// decodeIdentity reads a published identity back: the worker's identity
// and its policy. ok is false for an identity that publishes none.
func decodeIdentity(s string) (base string, p policy, ok bool) {
	parts := strings.Split(s, ";")
	if len(parts) < 2 || parts[1] != policyMarker || parts[0] == "" {
		return "", nil, false
	}
	p = policy{}
	for _, kv := range parts[2:] {
		k, v, found := strings.Cut(kv, "=")
		if !found || k == "" || v == "" {
			return "", nil, false
		}
		p[k] = v
	}
	return parts[0], p, true
}
