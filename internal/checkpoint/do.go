package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// cleanupTimeout bounds the best-effort deletions Do makes after the step,
// which run even when the step's context is already canceled.
const cleanupTimeout = time.Minute

// Do runs a checkpointed step. If a complete checkpoint of key exists for
// the inputs fingerprint, Do returns the outputs recorded in it, with hit
// true, without calling fn. Otherwise it calls fn with a fresh [Writer],
// then commits the datasets fn wrote, together with fn's outputs, and
// returns those outputs.
//
// Outputs are stored as JSON, and Do always returns them decoded from that
// JSON, so that a step returns the same value whether it ran or not. O must
// therefore survive a JSON round trip; [Ref] values do.
//
// Files of earlier attempts that did not commit are ignored. If two
// attempts race, one commits; the other discards its files and returns the
// winner's outputs with hit true.
func Do[O any](ctx context.Context, store *s3store.Store, key Key, inputs string,
	fn func(ctx context.Context, w *Writer) (O, error)) (out O, hit bool, err error) {
	if err := key.validate(); err != nil {
		return out, false, err
	}
	if err := validateFingerprint(inputs); err != nil {
		return out, false, err
	}
	out, hit, err = lookup[O](ctx, store, key, inputs)
	if hit || err != nil {
		return out, hit, err
	}
	dir := key.dir(inputs)

	w := newWriter(ctx, store, key, inputs)
	w.log.InfoContext(ctx, "checkpoint: miss, running step")
	result, err := run(ctx, w, fn)
	if err != nil {
		w.abort(err)
		w.discard()
		return out, false, err
	}
	raw, err := json.Marshal(result)
	if err != nil {
		w.abort(err)
		w.discard()
		return out, false, fmt.Errorf("checkpoint: encode outputs of %s: %w", key, err)
	}
	if out, err = decodeOutputs[O](raw); err != nil {
		w.abort(err)
		w.discard()
		return out, false, err
	}
	datasets, err := w.seal()
	if err != nil {
		w.abort(err)
		w.discard()
		return out, false, err
	}
	m := &Manifest{
		Format:   manifestFormat,
		Pipeline: key.Pipeline,
		Run:      key.Run,
		Node:     key.Node,
		Inputs:   inputs,
		Attempt:  w.attempt,
		Created:  time.Now().UTC(),
		Datasets: datasets,
		Outputs:  raw,
	}
	for _, d := range datasets {
		m.Rows += d.Rows
	}
	theirs, err := putManifest(ctx, store, dir, key, m)
	if err != nil || theirs != nil {
		w.discard()
	}
	if err != nil {
		return out, false, err
	}
	if theirs != nil {
		w.log.InfoContext(ctx, "checkpoint: another attempt committed first")
		out, err = decodeOutputs[O](theirs.Outputs)
		return out, err == nil, err
	}
	w.log.InfoContext(ctx, "checkpoint: committed", "datasets", len(datasets), "rows", m.Rows)
	w.sweep()
	return out, false, nil
}

// run calls fn, and cleans up after it if it panics: its uploads would
// otherwise wait forever for the rest of their files.
func run[O any](ctx context.Context, w *Writer, fn func(context.Context, *Writer) (O, error)) (O, error) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("checkpoint: step panicked: %v", p)
			w.abort(err)
			w.discard()
			panic(p)
		}
	}()
	return fn(ctx, w)
}

func decodeOutputs[O any](raw json.RawMessage) (O, error) {
	var out O
	if len(raw) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("checkpoint: decode outputs: %w", err)
	}
	return out, nil
}

// discard deletes this attempt's files, best effort: GC collects whatever
// is left behind.
func (w *Writer) discard() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), cleanupTimeout)
	defer cancel()
	if _, err := w.store.DeleteByPrefix(ctx, w.dir+w.attempt+"/"); err != nil {
		w.log.WarnContext(ctx, "checkpoint: cannot delete files of failed attempt", "error", err)
	}
}

// sweep deletes the files of other attempts at this checkpoint, best
// effort, once this attempt has committed: nothing can ever read them.
func (w *Writer) sweep() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), cleanupTimeout)
	defer cancel()
	attempts, err := w.store.ListPrefixes(ctx, w.dir)
	if err != nil {
		w.log.WarnContext(ctx, "checkpoint: cannot list stale attempts", "error", err)
		return
	}
	for _, a := range attempts {
		if a == w.attempt {
			continue
		}
		n, err := w.store.DeleteByPrefix(ctx, w.dir+a+"/")
		if err != nil {
			w.log.WarnContext(ctx, "checkpoint: cannot delete stale attempt", "stale_attempt", a, "error", err)
			continue
		}
		w.log.InfoContext(ctx, "checkpoint: deleted files of stale attempt", "stale_attempt", a, "objects", n)
	}
}

// putManifest commits m as the checkpoint's manifest in dir unless one is
// there already. When another attempt committed first, theirs is its
// manifest: its outputs are the ones every reader of the checkpoint sees,
// so they are the ones to return.
func putManifest(ctx context.Context, store *s3store.Store, dir string, key Key, m *Manifest) (theirs *Manifest, err error) {
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode manifest: %w", err)
	}
	_, err = store.PutIfAbsent(ctx, dir+manifestName, strings.NewReader(string(body)))
	switch {
	case errors.Is(err, s3store.ErrExists):
		return loadManifest(ctx, store, dir+manifestName)
	case err != nil:
		return nil, fmt.Errorf("checkpoint: commit %s: %w", key, err)
	}
	return nil, nil
}
