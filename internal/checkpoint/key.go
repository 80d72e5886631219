package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// root is where checkpoints live below a Store's prefix.
const root = "checkpoints/"

// Key names the step a checkpoint belongs to.
type Key struct {
	Pipeline string
	Run      string // the pipeline run, e.g. the Temporal workflow run ID
	Node     string // the step within the pipeline
}

func (k Key) String() string { return k.Pipeline + "/" + k.Run + "/" + k.Node }

func (k Key) validate() error {
	for _, c := range []struct{ what, v string }{{"pipeline", k.Pipeline}, {"run", k.Run}, {"node", k.Node}} {
		if err := validateSegment(c.v); err != nil {
			return fmt.Errorf("checkpoint: %s: %w", c.what, err)
		}
	}
	return nil
}

// dir is the folder of the checkpoint of k for inputs.
func (k Key) dir(inputs string) string {
	return root + k.Pipeline + "/" + k.Run + "/" + k.Node + "/" + inputs + "/"
}

// validateSegment accepts names that are one valid key segment.
func validateSegment(s string) error {
	if strings.Contains(s, "/") {
		return fmt.Errorf("%q contains /", s)
	}
	return s3store.ValidateKey(s)
}

// Fingerprint returns a short stable digest of a step's inputs, for use as
// the inputs fingerprint of [Do]: the hex SHA-256 of their JSON encoding,
// truncated to 128 bits. Inputs that encode to the same JSON (maps are
// encoded with sorted keys) have the same fingerprint.
func Fingerprint(inputs any) (string, error) {
	b, err := json.Marshal(inputs)
	if err != nil {
		return "", fmt.Errorf("checkpoint: fingerprint inputs: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

func validateFingerprint(fp string) error {
	if fp == "" || len(fp) > 128 {
		return fmt.Errorf("checkpoint: inputs fingerprint must be 1 to 128 characters, got %d", len(fp))
	}
	for _, r := range fp {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("checkpoint: inputs fingerprint %q: only letters, digits, '-', '_' and '.' are allowed", fp)
		}
	}
	if fp == "." || fp == ".." {
		return fmt.Errorf("checkpoint: inputs fingerprint %q is not a name", fp)
	}
	return nil
}
