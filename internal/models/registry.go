package models

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

var (
	// ErrNotFound: no such model, complete version, alias or history entry.
	ErrNotFound = errors.New("models: not found")
	// ErrVersionExists: the version exists (or is being registered) with
	// different artifacts.
	ErrVersionExists = errors.New("models: version exists with different artifacts")
	// ErrConcurrentMove: the alias moved while a move was being decided
	// (a compare-and-swap found another version, or an undo of the latest
	// move lost a race); look at the history and try again.
	ErrConcurrentMove = errors.New("models: alias moved concurrently")
	// ErrSuperseded: the alias names a version trained for a later logical
	// time than the one a move would point it at (see [Superseded] and
	// [Registry.Move]).
	ErrSuperseded = errors.New("models: superseded by a newer version")
	// ErrNoPrevious: the alias has no earlier version to roll back to.
	ErrNoPrevious = errors.New("models: no previous version")
	// ErrInvalidName: a model, version or alias name breaks the naming
	// rules. Nothing was read or written.
	ErrInvalidName = errors.New("models: invalid name")
)

// nameError is a naming rule violation; it is an ErrInvalidName.
type nameError struct{ msg string }

func (e *nameError) Error() string        { return e.msg }
func (e *nameError) Is(target error) bool { return target == ErrInvalidName }

// Registry reads and writes models in a Store. It is safe for concurrent
// use, also from several processes.
type Registry struct {
	store *s3store.Store
	log   *slog.Logger
	now   func() time.Time
}

// New returns a Registry on store, logging to the store's logger.
func New(store *s3store.Store) *Registry {
	return &Registry{store: store, log: store.Logger(), now: time.Now}
}

// DefaultAlias is the alias a bare model name resolves to.
const DefaultAlias = "production"

const root = "models/"

func modelDir(name string) string            { return root + name + "/" }
func versionDir(name, version string) string { return modelDir(name) + "versions/" + version + "/" }
func modelKey(name, version string) string   { return versionDir(name, version) + "model.json" }
func claimKey(name, version string) string   { return versionDir(name, version) + "claim.json" }
func fileKey(name, version, path string) string {
	return versionDir(name, version) + "files/" + path
}
func digestKey(name, checksum string) string {
	return modelDir(name) + "digests/" + strings.TrimPrefix(checksum, "sha256:") + ".json"
}
func aliasKey(name, alias string) string { return modelDir(name) + "aliases/" + alias + ".json" }
func historyDir(name, alias string) string {
	return modelDir(name) + "aliases/" + alias + "/history/"
}

// historyKey pads the sequence number so that keys sort in move order.
func historyKey(name, alias string, seq int64) string {
	return fmt.Sprintf("%s%020d.json", historyDir(name, alias), seq)
}

// validateName checks model, version and alias names: 1 to 128 letters,
// digits, '.', '_' and '-', starting with a letter or digit. They are single
// key segments and cannot contain '@', which separates them in references.
func validateName(what, s string) error {
	if s == "" || len(s) > 128 {
		return &nameError{fmt.Sprintf("models: %s name %q must be 1 to 128 characters", what, s)}
	}
	for i, r := range s {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '.' && r != '_' && r != '-') {
			return &nameError{fmt.Sprintf("models: %s name %q: only letters, digits, '.', '_' and '-' are allowed, starting with a letter or digit", what, s)}
		}
	}
	return nil
}

// ValidateName checks a model, version or alias name (what says which, for
// the message) against the naming rules, so callers can reject bad input
// before doing any work. The error is an [ErrInvalidName].
func ValidateName(what, s string) error { return validateName(what, s) }

// URI returns where the artifact files of v are stored, for systems that
// read them directly.
func (r *Registry) URI(v Version) s3store.URI {
	return r.store.URI().Join(versionDir(v.Name, v.Version) + "files/")
}
