package cli

import (
	"strings"
	"testing"
	"time"
)

func TestPauseNote(t *testing.T) {
	t.Setenv("RETRAIN_USER", "alice")
	if got := pauseNote("paused", "lake migration"); !strings.HasPrefix(got, "lake migration (paused by alice via retrain CLI ") || !strings.Contains(got, "@") {
		t.Errorf("note %q", got)
	}
	if got := pauseNote("unpaused", ""); !strings.HasPrefix(got, "unpaused by alice via retrain CLI ") {
		t.Errorf("note %q", got)
	}
	if got := listNote(scheduleRow{Note: "managed by retrain schedule apply from a.yaml"}); got != "-" {
		t.Errorf("list note of a running schedule %q", got)
	}
	if got := listNote(scheduleRow{Paused: true, Note: "x (paused by alice via retrain CLI 1@h)"}); got != "x (paused by alice via retrain CLI 1@h)" {
		t.Errorf("list note %q", got)
	}
}

func TestLocalAction(t *testing.T) {
	at := time.Date(2027, 3, 28, 1, 0, 0, 0, time.UTC)
	if got := localAction(at, "Europe/Berlin"); got != "2027-03-28 03:00 CEST (2027-03-28T01:00:00Z)" {
		t.Errorf("Berlin: %q", got)
	}
	if got := localAction(at, ""); got != "2027-03-28T01:00:00Z" {
		t.Errorf("UTC: %q", got)
	}
}
