package worker

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/retrain-ml/retrain/activities/progenv"
)

// Environment variables that default the program environment flags.
const (
	EnvPassEnv    = "RETRAIN_PASS_ENV"
	EnvSecretsDir = "RETRAIN_SECRETS_DIR"
	EnvAllowPaths = "RETRAIN_ALLOW_PATHS"
)

// addEnvFlags registers the flags of what programs that steps start see
// of the worker (progenv.Policy): the variables passed on beyond the
// base, where secrets come from, and where local paths may lie.
func addEnvFlags(fs *pflag.FlagSet, p *progenv.Policy) {
	fs.StringSliceVar(&p.PassEnv, "pass-env", splitEnv(EnvPassEnv),
		"worker environment variables that programs steps start get too, beyond PATH, HOME, USER, LOGNAME, LANG, LC_*, TMPDIR and TZ; NAME* is a prefix, e.g. AWS_*,HF_HOME (env "+EnvPassEnv+")")
	fs.StringVar(&p.SecretsDir, "secrets-dir", os.Getenv(EnvSecretsDir),
		"folder of files named after secrets: ${secret.NAME} in a step's env or webhook URL reads "+progenv.SecretEnvPrefix+"NAME, else this folder's file NAME (env "+EnvSecretsDir+")")
	fs.StringSliceVar(&p.AllowPaths, "allow-paths", splitEnv(EnvAllowPaths),
		"folders that checkpoint source and deploy dir paths must lie under, e.g. /data,/models; empty: any path (env "+EnvAllowPaths+")")
}

func splitEnv(name string) []string {
	if v := os.Getenv(name); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}
