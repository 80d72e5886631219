// Package datadir names the dev stack's data folder: where `retrain dev`
// keeps its state and where the lake and the store of checkpoints and
// models look by default. The name is written here once so the commands
// cannot drift apart.
package datadir

import "os"

// Default is the data folder when neither --data-dir nor RETRAIN_DATA_DIR
// says otherwise: .retrain in the working directory.
const Default = ".retrain"

// Env is the environment variable that overrides Default for commands
// that read the dev stack's data.
const Env = "RETRAIN_DATA_DIR"

// FromEnv returns $RETRAIN_DATA_DIR, or Default when it is unset or empty.
func FromEnv() string {
	if d := os.Getenv(Env); d != "" {
		return d
	}
	return Default
}
