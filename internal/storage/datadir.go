package storage

import "os"

// The dev stack's data folder: where `retrain dev` keeps its state and
// where the lake and the store of checkpoints and models look by default.
// The name is written here once so the commands cannot drift apart.

// DefaultDataDir is the data folder when neither --data-dir nor
// RETRAIN_DATA_DIR says otherwise: .retrain in the working directory.
const DefaultDataDir = ".retrain"

// DataDirEnv is the environment variable that overrides DefaultDataDir for
// commands that read the dev stack's data.
const DataDirEnv = "RETRAIN_DATA_DIR"

// DataDirFromEnv returns $RETRAIN_DATA_DIR, or DefaultDataDir when it is
// unset or empty.
func DataDirFromEnv() string {
	if d := os.Getenv(DataDirEnv); d != "" {
		return d
	}
	return DefaultDataDir
}
