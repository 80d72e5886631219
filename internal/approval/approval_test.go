package approval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listed returns an approvers list holding alice's key.
func listed(t *testing.T, key string) Approvers {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, Dir, "alice"), []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Approvers{SecretsDir: dir}
}

func TestVerify(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	now := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	base := Request{Workflow: "run-1/canary", Execution: "e1", Decision: "canary-approve", By: "alice", Reason: "dashboards fine"}
	signed := Stamp([]byte(key), base, now.Add(-time.Minute))
	list := listed(t, key)
	tests := []struct {
		name    string
		list    Approvers
		r       Request
		mode    string
		refusal string
	}{
		{"no secrets folder: claimed", Approvers{}, base, Claimed, ""},
		{"no approvers folder: claimed", Approvers{SecretsDir: t.TempDir()}, base, Claimed, ""},
		{"signed by a listed approver", list, signed, Signed, ""},
		{"unsigned", list, base, Refused, "not signed"},
		{"unknown name", list, func() Request { r := signed; r.By = "mallory"; return r }(), Refused, "not an approver"},
		{"a name that leaves the folder", list, func() Request { r := signed; r.By = "../alice"; return r }(), Refused, "not an approver"},
		{"signed with another key", list, Stamp([]byte("another key of 32 bytes or so..."), base, now), Refused, "signature"},
		{"moved onto another node", list, func() Request { r := signed; r.Workflow = "run-1/gate"; return r }(), Refused, "signature"},
		{"moved onto another execution", list, func() Request { r := signed; r.Execution = "e2"; return r }(), Refused, "signature"},
		{"moved onto another decision", list, func() Request { r := signed; r.Decision = "canary-reject"; return r }(), Refused, "signature"},
		{"another reason", list, func() Request { r := signed; r.Reason = "because"; return r }(), Refused, "signature"},
		{"another time", list, func() Request { r := signed; r.At = now.Format(time.RFC3339Nano); return r }(), Refused, "signature"},
		{"signed an hour ago", list, Stamp([]byte(key), base, now.Add(-time.Hour)), Refused, "more than"},
		{"a short key on the worker", listed(t, "short"), Stamp([]byte("short"), base, now), Refused, "shorter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := tt.list.Verify(tt.r, now)
			if err != nil {
				t.Fatal(err)
			}
			if v.Mode != tt.mode || !strings.Contains(v.Refusal, tt.refusal) || (tt.refusal == "") != (v.Refusal == "") {
				t.Fatalf("verdict %+v, want %s %q", v, tt.mode, tt.refusal)
			}
			if strings.Contains(v.Refusal, key) {
				t.Fatalf("refusal shows the key: %s", v.Refusal)
			}
		})
	}
}

func TestApproversNotAFolder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, Dir), []byte("alice:key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (Approvers{SecretsDir: dir}).Verify(Request{By: "alice"}, time.Now()); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("error %v", err)
	}
}

func TestPhrase(t *testing.T) {
	if got := Phrase("approved", Who("alice", Signed)); got != "approved by alice" {
		t.Errorf("signed: %q", got)
	}
	if got := Phrase("approved", Who("alice", Claimed)); got != "approved, claimed by alice" {
		t.Errorf("claimed: %q", got)
	}
}
