package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// A checkpoint written in parts: a step that fans out (a split's bucket
// groups, each an activity on whichever worker takes it) cannot stream
// every dataset through one Writer in one process. Instead:
//
//   - the step picks an attempt ([NewAttempt]) once, where it plans;
//   - each part opens a Writer of its own with [NewPart] below that attempt
//     (attempt/part/<dataset>-part-00000.parquet), writes its share of the
//     datasets, and closes it with [Writer.ClosePart], which uploads the
//     list of its files (attempt/part/part.json) and returns that list's
//     key: a part's output travels by reference, however many files it has;
//   - [Commit] gathers the parts' lists into one manifest, written as [Do]
//     writes it (If-None-Match: one commit wins, the others return its
//     outputs), and deletes what no manifest names: parts that failed or
//     were redone, and anything else left in the checkpoint's folder.
//
// A part that is retried writes under a new name ([NewPart] draws one),
// so a retry never collides with what a dead or still running attempt of
// the same part leaves; Commit uses only the lists it is given.

// partListName is the file list a part leaves in its folder.
const partListName = "part.json"

// NewAttempt returns a fresh attempt name: the folder below the
// checkpoint's that the parts of one try at the step write under.
func NewAttempt() string {
	var b [4]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// NewPart returns a Writer for one part of the checkpoint of key for
// inputs, attempt attempt: its files go under attempt/<name>-<random>/,
// named <dataset>-<name>-<random>-00000.parquet: unique across parts, in
// the order of the parts' names.
// Close it with ClosePart, or Discard it.
func NewPart(ctx context.Context, store *s3store.Store, key Key, inputs, attempt, name string) (*Writer, error) {
	if err := key.validate(); err != nil {
		return nil, err
	}
	if err := validateFingerprint(inputs); err != nil {
		return nil, err
	}
	for _, s := range []string{attempt, name} {
		if err := validateSegment(s); err != nil {
			return nil, fmt.Errorf("checkpoint: part: %w", err)
		}
	}
	w := newWriter(ctx, store, key, inputs)
	var b [4]byte
	rand.Read(b[:])
	w.part = name + "-" + hex.EncodeToString(b[:])
	w.attempt = attempt + "/" + w.part
	w.log = w.log.With("attempt", w.attempt)
	return w, nil
}

// ClosePart ends a part: every dataset written to w must be closed. It
// uploads the list of the part's files and returns its key, for Commit.
func (w *Writer) ClosePart() (string, error) {
	datasets, err := w.seal()
	if err != nil {
		w.abort(err)
		return "", err
	}
	body, err := json.Marshal(datasets)
	if err != nil {
		return "", fmt.Errorf("checkpoint: encode part list: %w", err)
	}
	key := w.dir + w.attempt + "/" + partListName
	if _, err := w.store.PutBytes(w.ctx, key, body); err != nil {
		return "", fmt.Errorf("checkpoint: write part list: %w", err)
	}
	return key, nil
}

// Discard stops a part and deletes its files, best effort.
func (w *Writer) Discard(err error) {
	w.abort(err)
	w.discard()
}

// Lookup returns the outputs of the complete checkpoint of key for inputs,
// with hit true, as [Do] would without running its step. A checkpoint
// whose files are broken is discarded (a miss), so the step runs again.
func Lookup[O any](ctx context.Context, store *s3store.Store, key Key, inputs string) (out O, hit bool, err error) {
	if err := key.validate(); err != nil {
		return out, false, err
	}
	if err := validateFingerprint(inputs); err != nil {
		return out, false, err
	}
	return lookup[O](ctx, store, key, inputs)
}

// lookup is Lookup on a checked key and inputs.
func lookup[O any](ctx context.Context, store *s3store.Store, key Key, inputs string) (out O, hit bool, err error) {
	dir := key.dir(inputs)
	log := store.Logger().With("checkpoint", key.String(), "inputs", inputs)
	m, err := loadManifest(ctx, store, dir+manifestName)
	switch {
	case errors.Is(err, ErrNotFound):
		return out, false, nil
	case err != nil:
		return out, false, err
	}
	verr := verifyFiles(ctx, store, dir, m)
	if verr == nil {
		out, err := decodeOutputs[O](m.Outputs)
		if err == nil {
			log.InfoContext(ctx, "checkpoint: hit, step skipped", "attempt", m.Attempt, "rows", m.Rows)
		}
		return out, err == nil, err
	}
	if !errors.Is(verr, ErrCorrupt) {
		return out, false, verr
	}
	// The checkpoint cannot be read back; recompute rather than fail
	// every retry the same way.
	log.WarnContext(ctx, "checkpoint: discarding broken checkpoint", "error", verr)
	if err := store.Delete(ctx, dir+manifestName); err != nil {
		return out, false, fmt.Errorf("checkpoint: discard broken checkpoint: %w", err)
	}
	return out, false, nil
}

// ManifestKey is where the manifest of the checkpoint of key for inputs
// is, once committed: what a Ref to one of its datasets names.
func ManifestKey(key Key, inputs string) string { return key.dir(inputs) + manifestName }

// Commit commits the checkpoint of key for inputs whose datasets the parts
// listed at partKeys (ClosePart's keys, all of attempt) wrote, with
// outputs. A dataset's files are the parts' files in the order of
// partKeys. If another commit won, its outputs are returned, with hit
// true. Files in the checkpoint's folder that the manifest does not name
// are deleted afterwards, best effort.
func Commit[O any](ctx context.Context, store *s3store.Store, key Key, inputs, attempt string, partKeys []string, outputs O) (out O, hit bool, err error) {
	if err := key.validate(); err != nil {
		return out, false, err
	}
	if err := validateFingerprint(inputs); err != nil {
		return out, false, err
	}
	dir := key.dir(inputs)
	log := store.Logger().With("checkpoint", key.String(), "inputs", inputs, "attempt", attempt)
	var datasets []Dataset
	for _, k := range partKeys {
		if !strings.HasPrefix(k, dir+attempt+"/") {
			return out, false, fmt.Errorf("checkpoint: part list %s is not of attempt %s of %s", k, attempt, key)
		}
		b, _, err := store.GetBytes(ctx, k)
		if err != nil {
			return out, false, fmt.Errorf("checkpoint: read part list: %w", err)
		}
		var part []Dataset
		if err := json.Unmarshal(b, &part); err != nil {
			return out, false, fmt.Errorf("%w: part list %s: %v", ErrCorrupt, k, err)
		}
		if datasets, err = mergeDatasets(datasets, part); err != nil {
			return out, false, fmt.Errorf("checkpoint: part %s: %w", k, err)
		}
	}
	raw, err := json.Marshal(outputs)
	if err != nil {
		return out, false, fmt.Errorf("checkpoint: encode outputs of %s: %w", key, err)
	}
	if out, err = decodeOutputs[O](raw); err != nil {
		return out, false, err
	}
	m := &Manifest{
		Format: manifestFormat, Pipeline: key.Pipeline, Run: key.Run, Node: key.Node, Inputs: inputs,
		Attempt: attempt, Created: time.Now().UTC(), Datasets: datasets, Outputs: raw,
	}
	for _, d := range datasets {
		m.Rows += d.Rows
	}
	// The parts ran elsewhere: their files are checked to be there, as a
	// hit checks them, before the manifest vouches for them.
	if err := verifyFiles(ctx, store, dir, m); err != nil {
		return out, false, err
	}
	theirs, err := putManifest(ctx, store, dir, key, m)
	if err != nil {
		return out, false, err
	}
	if theirs != nil {
		log.InfoContext(ctx, "checkpoint: another attempt committed first")
		out, err = decodeOutputs[O](theirs.Outputs)
		return out, err == nil, err
	}
	log.InfoContext(ctx, "checkpoint: committed", "parts", len(partKeys), "datasets", len(datasets), "rows", m.Rows)
	sweepUnnamed(ctx, store, dir, m, log)
	return out, false, nil
}

// DiscardAttempt deletes every file of an attempt that will not be
// committed (a split whose coverage check failed), best effort.
func DiscardAttempt(ctx context.Context, store *s3store.Store, key Key, inputs, attempt string) {
	if key.validate() != nil || validateFingerprint(inputs) != nil || validateSegment(attempt) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := store.DeleteByPrefix(ctx, key.dir(inputs)+attempt+"/"); err != nil {
		store.Logger().WarnContext(ctx, "checkpoint: cannot delete files of failed attempt", "checkpoint", key.String(), "attempt", attempt, "error", err)
	}
}

// mergeDatasets appends part's datasets to those of the parts before it:
// files appended, rows added. A dataset's schema must be the same in
// every part.
func mergeDatasets(into, part []Dataset) ([]Dataset, error) {
	for _, d := range part {
		i := slices.IndexFunc(into, func(x Dataset) bool { return x.Name == d.Name })
		if i < 0 {
			into = append(into, d)
			continue
		}
		if into[i].Schema != d.Schema {
			return nil, fmt.Errorf("dataset %s has another schema than in the parts before it", d.Name)
		}
		into[i].Files = append(into[i].Files, d.Files...)
		into[i].Rows += d.Rows
	}
	slices.SortFunc(into, func(a, b Dataset) int { return strings.Compare(a.Name, b.Name) })
	return into, nil
}

// sweepUnnamed deletes the objects in a committed checkpoint's folder that
// its manifest does not name, best effort: parts that failed or were
// redone, part lists, and other attempts. Nothing can read them.
func sweepUnnamed(ctx context.Context, store *s3store.Store, dir string, m *Manifest, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	named := map[string]bool{dir + manifestName: true}
	for _, d := range m.Datasets {
		for _, f := range d.Files {
			named[f.Key] = true
		}
	}
	var stale []string
	for o, err := range store.List(ctx, dir) {
		if err != nil {
			log.WarnContext(ctx, "checkpoint: cannot list files to sweep", "error", err)
			return
		}
		if !named[o.Key] {
			stale = append(stale, o.Key)
		}
	}
	if len(stale) == 0 {
		return
	}
	n, err := store.DeleteKeys(ctx, stale)
	if err != nil {
		log.WarnContext(ctx, "checkpoint: cannot delete unnamed files", "error", err)
	}
	log.InfoContext(ctx, "checkpoint: deleted files no manifest names", "objects", n)
}
