package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// claim is the content of claim.json.
type claim struct {
	Checksum string    `json:"checksum"`
	Created  time.Time `json:"created"`
	Run      string    `json:"pipeline_run,omitempty"`
}

// claimVersion makes sure version is claimed for checksum, claiming it if
// nobody has.
func (r *Registry) claimVersion(ctx context.Context, name, version, checksum, run string) error {
	body, _ := json.Marshal(claim{Checksum: checksum, Created: r.now().UTC(), Run: run})
	// A claim can vanish between our failed create and our read: an
	// automatic numbering gives back a number it lost a race for.
	for range 3 {
		_, err := r.store.PutIfAbsent(ctx, claimKey(name, version), strings.NewReader(string(body)))
		if err == nil {
			return nil
		}
		if !errors.Is(err, s3store.ErrExists) {
			return fmt.Errorf("models: claim %s@%s: %w", name, version, err)
		}
		b, _, err := r.store.GetBytes(ctx, claimKey(name, version))
		if errors.Is(err, s3store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("models: read claim of %s@%s: %w", name, version, err)
		}
		var theirs claim
		if err := json.Unmarshal(b, &theirs); err != nil {
			return fmt.Errorf("models: read claim of %s@%s: %w", name, version, err)
		}
		if theirs.Checksum != checksum {
			return fmt.Errorf("%w: %s@%s was registered (or is being registered) with artifacts %s at %s; these are %s",
				ErrVersionExists, name, version, theirs.Checksum, theirs.Created.Format(time.RFC3339), checksum)
		}
		return nil
	}
	return fmt.Errorf("models: claim %s@%s: claim keeps changing", name, version)
}

// maxClaimAttempts bounds the search for a free version number; each
// failed attempt means another registration took a number meanwhile.
const maxClaimAttempts = 100

// claimNumber returns the version holding checksum, or claims the next
// free "vN" for it.
func (r *Registry) claimNumber(ctx context.Context, name, checksum, run string) (string, error) {
	if v, err := r.lookupDigest(ctx, name, checksum); err == nil {
		return v, r.claimVersion(ctx, name, v, checksum, run)
	} else if !errors.Is(err, ErrNotFound) {
		return "", err
	}
	next, err := r.nextNumber(ctx, name)
	if err != nil {
		return "", err
	}
	for range maxClaimAttempts {
		version := "v" + strconv.Itoa(next)
		body, _ := json.Marshal(claim{Checksum: checksum, Created: r.now().UTC(), Run: run})
		_, err := r.store.PutIfAbsent(ctx, claimKey(name, version), strings.NewReader(string(body)))
		if errors.Is(err, s3store.ErrExists) {
			next++
			continue
		}
		if err != nil {
			return "", fmt.Errorf("models: claim %s@%s: %w", name, version, err)
		}
		// The number is ours; now make it the one for these artifacts,
		// unless a concurrent registration of the same artifacts got
		// there first.
		owner, err := r.indexDigest(ctx, name, checksum, version)
		if err != nil {
			return "", err
		}
		if owner != version {
			// Give the number back; it was never visible.
			if err := r.store.Delete(ctx, claimKey(name, version)); err != nil {
				r.log.WarnContext(ctx, "models: cannot release version claim", "model", name, "version", version, "error", err)
			}
			return owner, r.claimVersion(ctx, name, owner, checksum, run)
		}
		return version, nil
	}
	return "", fmt.Errorf("models: no free version number for %s after %d attempts", name, maxClaimAttempts)
}

// nextNumber returns one more than the highest "vN" version directory,
// complete or not.
func (r *Registry) nextNumber(ctx context.Context, name string) (int, error) {
	dirs, err := r.store.ListPrefixes(ctx, modelDir(name)+"versions/")
	if err != nil {
		return 0, fmt.Errorf("models: list versions of %s: %w", name, err)
	}
	highest := 0
	for _, d := range dirs {
		if n, ok := versionNumber(d); ok {
			highest = max(highest, n)
		}
	}
	return highest + 1, nil
}

func versionNumber(v string) (int, bool) {
	digits, ok := strings.CutPrefix(v, "v")
	if !ok || digits == "" || digits[0] == '0' {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

type digestEntry struct {
	Version string `json:"version"`
}

// indexDigest records version as the version holding checksum, unless one
// is recorded already, and returns the recorded one.
func (r *Registry) indexDigest(ctx context.Context, name, checksum, version string) (string, error) {
	body, _ := json.Marshal(digestEntry{Version: version})
	_, err := r.store.PutIfAbsent(ctx, digestKey(name, checksum), strings.NewReader(string(body)))
	if err == nil {
		return version, nil
	}
	if !errors.Is(err, s3store.ErrExists) {
		return "", fmt.Errorf("models: index %s@%s: %w", name, version, err)
	}
	return r.lookupDigest(ctx, name, checksum)
}

func (r *Registry) lookupDigest(ctx context.Context, name, checksum string) (string, error) {
	b, _, err := r.store.GetBytes(ctx, digestKey(name, checksum))
	if errors.Is(err, s3store.ErrNotFound) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("models: look up artifacts of %s: %w", name, err)
	}
	var e digestEntry
	if err := json.Unmarshal(b, &e); err != nil || validateName("version", e.Version) != nil {
		return "", fmt.Errorf("models: corrupt digest index %s", digestKey(name, checksum))
	}
	return e.Version, nil
}
