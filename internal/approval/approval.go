// Package approval says who approved: a human's decision on a gate or a
// canary (approve, force, reject) carries a name, and this package tells a
// name the worker can verify from one the sender merely claims.
//
// A worker's operator lists the approvers as files in the worker's secrets
// folder: approvers/NAME holds NAME's key (the same key the approver's
// `retrain approve` reads). With that folder present, a decision must be
// signed: an HMAC-SHA256 with the approver's key over the decision, the
// workflow execution it is for, who, why and when, so a signature cannot be
// moved onto another run, node or decision, nor replayed later. Without
// it, a decision is taken as before but recorded as claimed: "claimed by
// alice", never "approved by alice".
package approval

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Dir is the folder, inside the worker's secrets folder, of the approvers'
// key files: one file per approver, named after the approver.
const Dir = "approvers"

// MinKeyLen is the shortest key the worker accepts: shorter keys can be
// guessed offline from one signed decision.
const MinKeyLen = 16

// MaxSkew is how far a decision's time may lie from the worker's clock:
// older signatures are refused, so a captured one cannot be used later.
const MaxSkew = 10 * time.Minute

// Modes of a verified decision.
const (
	Signed  = "signed"  // signed with the key the approvers list holds for the name
	Claimed = "claimed" // no approvers list on the worker: the name is self-declared
	Refused = "refused" // an approvers list, and the decision is not signed by a listed name
)

// Request is one decision to verify: what the sender sent (By, Reason, At,
// Signature) and what it is for (Workflow, Execution, Decision), which the
// workflow fills in from itself, never from the sender.
type Request struct {
	Workflow  string `json:"workflow"`  // the gate's or canary's workflow id
	Execution string `json:"execution"` // its run id
	Decision  string `json:"decision"`  // the update or signal name: approve, canary-approve, canary-reject
	By        string `json:"by"`
	Reason    string `json:"reason"`
	At        string `json:"at,omitempty"` // RFC 3339, when it was signed
	Signature string `json:"signature,omitempty"`
}

// Verdict is what the worker found.
type Verdict struct {
	Mode    string `json:"mode"`              // Signed, Claimed or Refused
	Refusal string `json:"refusal,omitempty"` // why, for Refused: a sentence
}

// nameRe is what an approver's name may be: a file name in the approvers
// folder, so nothing that leaves it.
var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$`)

// message is what is signed: every field of the request, as a JSON array
// (unambiguous whatever the fields hold), under a version tag.
func message(r Request) []byte {
	b, _ := json.Marshal([]string{"retrain-approval-v1", r.Workflow, r.Execution, r.Decision, r.By, r.Reason, r.At})
	return b
}

// Sign returns r's signature with key (hex HMAC-SHA256).
func Sign(key []byte, r Request) string {
	m := hmac.New(sha256.New, key)
	m.Write(message(r))
	return hex.EncodeToString(m.Sum(nil))
}

// Stamp sets r.At to now and signs r with key.
func Stamp(key []byte, r Request, now time.Time) Request {
	r.At = now.UTC().Format(time.RFC3339Nano)
	r.Signature = Sign(key, r)
	return r
}

// Approvers is a worker's approvers list: the folder approvers/ in its
// secrets folder. The zero Approvers has no list.
type Approvers struct {
	SecretsDir string
}

// ErrNoList is what Key returns on a worker without an approvers list.
var ErrNoList = errors.New("no approvers list")

// dir is the approvers folder, or "" when the worker has none.
func (a Approvers) dir() (string, error) {
	if a.SecretsDir == "" {
		return "", nil
	}
	d := filepath.Join(a.SecretsDir, Dir)
	st, err := os.Stat(d)
	switch {
	case os.IsNotExist(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("approvers list: %w", err)
	case !st.IsDir():
		return "", fmt.Errorf("approvers list %s is not a folder (want one key file per approver)", d)
	}
	return d, nil
}

// Verify checks r against the list at time now. An error is the worker's
// own trouble (a list it cannot read), worth retrying; a bad decision is
// a Refused verdict.
func (a Approvers) Verify(r Request, now time.Time) (Verdict, error) {
	d, err := a.dir()
	if err != nil {
		return Verdict{}, err
	}
	if d == "" {
		return Verdict{Mode: Claimed}, nil
	}
	refuse := func(format string, args ...any) (Verdict, error) {
		return Verdict{Mode: Refused, Refusal: fmt.Sprintf(format, args...)}, nil
	}
	if !nameRe.MatchString(r.By) {
		return refuse("%q is not an approver this worker knows", clip(r.By))
	}
	key, err := os.ReadFile(filepath.Join(d, r.By))
	if os.IsNotExist(err) {
		return refuse("%q is not an approver this worker knows", r.By)
	}
	if err != nil {
		return Verdict{}, fmt.Errorf("approvers list: read %s's key: %w", r.By, err)
	}
	key = []byte(strings.TrimSpace(string(key)))
	if len(key) < MinKeyLen {
		return refuse("approver %s's key on the worker is shorter than %d bytes, so no decision of theirs is taken", r.By, MinKeyLen)
	}
	if r.Signature == "" {
		return refuse("the decision by %s is not signed, and this worker takes only signed decisions (retrain approve signs with --key-file)", r.By)
	}
	at, err := time.Parse(time.RFC3339Nano, r.At)
	if err != nil {
		return refuse("the decision by %s has no valid signing time", r.By)
	}
	if skew := now.Sub(at); skew > MaxSkew || skew < -MaxSkew {
		return refuse("the decision by %s was signed at %s, more than %s from the worker's clock", r.By, at.UTC().Format(time.RFC3339), MaxSkew)
	}
	want, _ := hex.DecodeString(Sign(key, r))
	got, err := hex.DecodeString(r.Signature)
	if err != nil || !hmac.Equal(want, got) {
		return refuse("the decision's signature is not %s's for this decision on %s", r.By, r.Workflow)
	}
	return Verdict{Mode: Signed}, nil
}

// clip shortens a name for a message: the sender chose it.
func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// Who is how a decision's maker is recorded: the name for a signed
// decision, "claimed by NAME" for one the worker could not verify.
func Who(by, mode string) string {
	if mode == Claimed {
		return "claimed by " + by
	}
	return by
}

// Phrase says who decided after verb: "approved by alice" for a signed
// decision, "approved, claimed by alice" for a claimed one (who as Who
// returns it).
func Phrase(verb, who string) string {
	if strings.HasPrefix(who, "claimed by ") {
		return verb + ", " + who
	}
	return verb + " by " + who
}
