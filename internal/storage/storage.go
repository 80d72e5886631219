// Package storage says where retrain keeps its objects (checkpoints and the
// model registry) and opens that store. The worker and the CLI take the same
// configuration from here, so `retrain model ...` finds the models a worker
// registered:
//
//   - real S3 or an S3-compatible server: --s3-uri s3://bucket/prefix, with
//     --s3-endpoint, --s3-region and --s3-path-style (or the RETRAIN_S3_*
//     environment); credentials come from the standard AWS chain
//     (AWS_ACCESS_KEY_ID, shared config files, SSO, instance roles), never
//     from flags, which other users of the machine can read;
//   - the dev stack: with no --s3-uri, --data-dir DIR uses the S3 server of
//     `retrain dev` on that data dir, which records how to reach it in
//     DIR/s3/connection.json.
package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// ErrNotConfigured: neither an S3 URI nor a dev stack data dir with a
// running S3 server was given.
var ErrNotConfigured = errors.New("storage: no object store configured: set --s3-uri s3://bucket/prefix (env RETRAIN_S3_URI), or --data-dir of a `retrain dev` stack")

// DefaultRetentionDays is how long checkpoints are kept by default.
const DefaultRetentionDays = 7

// Config is where the object store is. Only S3.URI, S3.Endpoint, S3.Region
// and PathStyle come from flags; a caller that knows more (the dev stack,
// tests) sets the rest of S3, static credentials included.
type Config struct {
	S3 s3store.Config
	// PathStyle overrides the addressing style; nil means path-style when
	// an endpoint is set (S3-compatible servers) and virtual-hosted
	// buckets otherwise (AWS).
	PathStyle *bool
	// DataDir is a dev stack's data dir, used when S3.URI is empty.
	DataDir string
	// RetentionDays is how long checkpoints are kept: a worker asks the
	// server for a lifecycle rule of that many days where it supports
	// one. 0 sets no rule.
	RetentionDays int
}

// FromEnv returns the configuration the RETRAIN_S3_* environment variables
// describe; they are also the defaults of the flags AddFlags registers.
func FromEnv() Config {
	c := Config{
		S3: s3store.Config{
			URI:      os.Getenv("RETRAIN_S3_URI"),
			Endpoint: os.Getenv("RETRAIN_S3_ENDPOINT"),
			Region:   os.Getenv("RETRAIN_S3_REGION"),
		},
		DataDir:       os.Getenv("RETRAIN_DATA_DIR"),
		RetentionDays: DefaultRetentionDays,
	}
	if v, err := strconv.ParseBool(os.Getenv("RETRAIN_S3_PATH_STYLE")); err == nil {
		c.PathStyle = &v
	}
	if v, err := strconv.Atoi(os.Getenv("RETRAIN_CHECKPOINT_RETENTION_DAYS")); err == nil {
		c.RetentionDays = v
	}
	return c
}

// AddFlags registers the object store flags, defaulting from the
// environment (see FromEnv). The S3 endpoint and region are the same for
// every part of retrain that talks to S3: when the flag set already has
// --s3-endpoint or --s3-region (the lake's warehouse flags), the flag sets
// both configurations instead of being registered twice.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	env := FromEnv()
	c.PathStyle = env.PathStyle
	fs.StringVar(&c.S3.URI, "s3-uri", env.S3.URI, "where checkpoints and models live, s3://bucket/prefix (env RETRAIN_S3_URI; default: the dev stack's S3 server under --data-dir)")
	bindString(fs, "s3-endpoint", &c.S3.Endpoint, env.S3.Endpoint, "S3 endpoint URL for S3-compatible servers (env RETRAIN_S3_ENDPOINT; default: AWS)",
		"also of the store of checkpoints and models")
	bindString(fs, "s3-region", &c.S3.Region, env.S3.Region, "S3 region (env RETRAIN_S3_REGION; default: the AWS environment)",
		"also of the store of checkpoints and models")
	fs.Var(&optionalBool{&c.PathStyle}, "s3-path-style", "address buckets as endpoint/bucket (env RETRAIN_S3_PATH_STYLE; default: when --s3-endpoint is set)")
	fs.Lookup("s3-path-style").NoOptDefVal = "true"
	fs.IntVar(&c.RetentionDays, "checkpoint-retention-days", env.RetentionDays, "expire checkpoints after this many days with a bucket lifecycle rule where the server supports one; 0 sets none (env RETRAIN_CHECKPOINT_RETENTION_DAYS)")
}

// AddDataDirFlag registers --data-dir, or shares it with a --data-dir the
// flag set already has (the lake's), for commands that have none of their
// own.
func (c *Config) AddDataDirFlag(fs *pflag.FlagSet) {
	bindString(fs, "data-dir", &c.DataDir, DataDirFromEnv(), "dev stack data dir: its S3 server holds checkpoints and models unless --s3-uri is set (env RETRAIN_DATA_DIR)",
		"its S3 server holds checkpoints and models unless --s3-uri is set")
}

// Resolve returns the s3store configuration c names. With no URI it reads
// the dev stack's connection file under DataDir; ok is false when there is
// none, which means no store is configured (not an error: a worker without
// one runs every step but those that need it).
func (c Config) Resolve() (cfg s3store.Config, ok bool, err error) {
	cfg = c.S3
	if cfg.URI == "" {
		if c.DataDir == "" {
			return cfg, false, nil
		}
		dev, err := ReadDevConnection(c.DataDir)
		if errors.Is(err, fs.ErrNotExist) {
			return cfg, false, nil
		}
		if err != nil {
			return cfg, false, err
		}
		dev.Logger = cfg.Logger
		dev.OpenTimeout = cfg.OpenTimeout
		dev.MaxAttempts, dev.MaxBackoff, dev.OnRetry, dev.OnRequest = cfg.MaxAttempts, cfg.MaxBackoff, cfg.OnRetry, cfg.OnRequest
		return dev, true, nil
	}
	switch {
	case c.PathStyle != nil:
		cfg.UsePathStyle = *c.PathStyle
	case cfg.Endpoint != "":
		cfg.UsePathStyle = true
	}
	return cfg, true, nil
}

// Open opens the configured store, checking that it is reachable with the
// configured credentials: a wrong endpoint or bad credentials fail here,
// before anything is written. It returns ErrNotConfigured when there is no
// store to open.
func Open(ctx context.Context, c Config, log *slog.Logger) (*s3store.Store, error) {
	cfg, ok, err := c.Resolve()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNotConfigured
	}
	if cfg.Logger == nil {
		cfg.Logger = log
	}
	st, err := s3store.Open(ctx, cfg)
	if err != nil {
		if c.S3.URI == "" {
			return nil, fmt.Errorf("dev stack object store (from %s; is `retrain dev` running on that data dir?): %w", DevConnectionPath(c.DataDir), err)
		}
		return nil, err
	}
	return st, nil
}

// DevConnectionPath is the file in which a dev stack on dataDir records how
// to reach its S3 server.
func DevConnectionPath(dataDir string) string {
	return filepath.Join(dataDir, "s3", "connection.json")
}

// devConnection is the content of the connection file. It holds the dev
// server's credentials, so it is written readable by its owner only.
type devConnection struct {
	URI             string `json:"uri"`
	Endpoint        string `json:"endpoint"`
	Region          string `json:"region"`
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
}

// WriteDevConnection records cfg as the dev stack's store on dataDir.
func WriteDevConnection(dataDir string, cfg s3store.Config) error {
	path := DevConnectionPath(dataDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	b, err := json.MarshalIndent(devConnection{
		URI: cfg.URI, Endpoint: cfg.Endpoint, Region: cfg.Region,
		AccessKeyID: cfg.AccessKeyID, SecretAccessKey: cfg.SecretAccessKey,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("storage: encode %s: %w", path, err)
	}
	// Write and rename, so that a reader never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// ReadDevConnection returns the store a dev stack on dataDir recorded. The
// error wraps fs.ErrNotExist when there is none.
func ReadDevConnection(dataDir string) (s3store.Config, error) {
	path := DevConnectionPath(dataDir)
	b, err := os.ReadFile(path)
	if err != nil {
		return s3store.Config{}, fmt.Errorf("storage: %w", err)
	}
	var d devConnection
	if err := json.Unmarshal(b, &d); err != nil {
		return s3store.Config{}, fmt.Errorf("storage: %s: %w", path, err)
	}
	if d.URI == "" || d.Endpoint == "" {
		return s3store.Config{}, fmt.Errorf("storage: %s names no store", path)
	}
	return s3store.Config{
		URI: d.URI, Endpoint: d.Endpoint, Region: d.Region, UsePathStyle: true,
		AccessKeyID: d.AccessKeyID, SecretAccessKey: d.SecretAccessKey,
	}, nil
}

// bindString registers a string flag, or, when fs already has a flag of
// that name, makes setting that flag set p too and adds also to its usage.
func bindString(fs *pflag.FlagSet, name string, p *string, def, usage, also string) {
	f := fs.Lookup(name)
	if f == nil {
		fs.StringVar(p, name, def, usage)
		return
	}
	*p = f.Value.String()
	f.Value = &teeValue{Value: f.Value, also: p}
	f.Usage += "; " + also
}

// teeValue is a flag value that also stores what it is set to in another
// string.
type teeValue struct {
	pflag.Value
	also *string
}

func (t *teeValue) Set(s string) error {
	if err := t.Value.Set(s); err != nil {
		return err
	}
	*t.also = t.Value.String()
	return nil
}

// optionalBool is a bool flag whose absence is told apart from false.
type optionalBool struct{ p **bool }

func (o *optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*o.p = &v
	return nil
}

func (o *optionalBool) String() string {
	if o.p == nil || *o.p == nil {
		return "auto"
	}
	return strconv.FormatBool(**o.p)
}

func (o *optionalBool) Type() string { return "bool" }
