package datadir

import "testing"

func TestFromEnv(t *testing.T) {
	t.Setenv(Env, "")
	if got := FromEnv(); got != ".retrain" {
		t.Errorf("unset: %q, want .retrain", got)
	}
	t.Setenv(Env, "/data/retrain")
	if got := FromEnv(); got != "/data/retrain" {
		t.Errorf("set: %q", got)
	}
}
