package storage

import "testing"

func TestDataDirFromEnv(t *testing.T) {
	t.Setenv(DataDirEnv, "")
	if got := DataDirFromEnv(); got != ".retrain" {
		t.Errorf("unset: %q, want .retrain", got)
	}
	t.Setenv(DataDirEnv, "/data/retrain")
	if got := DataDirFromEnv(); got != "/data/retrain" {
		t.Errorf("set: %q", got)
	}
}
