package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrNoCheckpoint is what Checkpointer.Latest returns when there is none.
var ErrNoCheckpoint = errors.New("trainer: no checkpoint")

// Checkpoint identifies a saved training state.
type Checkpoint struct {
	Step int64
	URI  string
}

// A Checkpointer stores training states.
//
// Save stores the state of step read from state and returns its URI. The
// state is streamed while it is encoded, so Save must read it to the end; it
// must make the checkpoint visible to Latest only once it is complete (write
// then rename, or an object store's atomic put), since the process may die
// at any point.
//
// Latest returns the checkpoint with the highest step and its state, which
// the caller closes, or an error wrapping ErrNoCheckpoint.
type Checkpointer interface {
	Save(ctx context.Context, step int64, state io.Reader) (uri string, err error)
	Latest(ctx context.Context) (Checkpoint, io.ReadCloser, error)
}

// MemoryCheckpointer keeps checkpoints in memory, for tests.
type MemoryCheckpointer struct {
	mu    sync.Mutex
	saved []memCheckpoint
}

type memCheckpoint struct {
	Checkpoint
	data []byte
}

// Save implements [Checkpointer].
func (c *MemoryCheckpointer) Save(ctx context.Context, step int64, state io.Reader) (string, error) {
	data, err := io.ReadAll(state)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	uri := fmt.Sprintf("mem:%d/step-%d", len(c.saved), step)
	c.saved = append(c.saved, memCheckpoint{Checkpoint{step, uri}, data})
	return uri, nil
}

// Latest implements [Checkpointer].
func (c *MemoryCheckpointer) Latest(ctx context.Context) (Checkpoint, io.ReadCloser, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.saved) == 0 {
		return Checkpoint{}, nil, ErrNoCheckpoint
	}
	best := c.saved[0]
	for _, s := range c.saved[1:] {
		if s.Step >= best.Step {
			best = s
		}
	}
	return best.Checkpoint, io.NopCloser(bytes.NewReader(best.data)), nil
}

// Checkpoints lists the checkpoints saved, oldest first.
func (c *MemoryCheckpointer) Checkpoints() []Checkpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Checkpoint
	for _, s := range c.saved {
		out = append(out, s.Checkpoint)
	}
	return out
}

// FileCheckpointer keeps checkpoints as files step-NNNNNNNNNNNN.ckpt in a
// local directory, which Save creates.
type FileCheckpointer struct {
	Dir string
	// Keep is how many of the newest checkpoints to keep; 0 keeps all.
	Keep int
}

const ckptPrefix, ckptSuffix = "step-", ".ckpt"

// Save implements [Checkpointer]: it writes to a temporary file, syncs it and
// renames it into place, so a crash leaves either the whole checkpoint or
// none.
func (c FileCheckpointer) Save(ctx context.Context, step int64, state io.Reader) (string, error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(c.Dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	_, err = io.Copy(f, state)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("save checkpoint of step %d: %w", step, err)
	}
	path := c.path(step)
	if err := os.Rename(f.Name(), path); err != nil {
		return "", err
	}
	if err := c.prune(); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return "file://" + filepath.ToSlash(abs), nil
}

// steps lists the steps of the checkpoints in Dir, in increasing order.
func (c FileCheckpointer) steps() ([]int64, error) {
	entries, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var steps []int64
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), ckptPrefix)
		if name, ok2 := strings.CutSuffix(name, ckptSuffix); ok && ok2 {
			if s, err := strconv.ParseInt(name, 10, 64); err == nil {
				steps = append(steps, s)
			}
		}
	}
	slices.Sort(steps)
	return steps, nil
}

func (c FileCheckpointer) path(step int64) string {
	return filepath.Join(c.Dir, fmt.Sprintf("%s%012d%s", ckptPrefix, step, ckptSuffix))
}

func (c FileCheckpointer) prune() error {
	if c.Keep <= 0 {
		return nil
	}
	steps, err := c.steps()
	if err != nil {
		return err
	}
	for len(steps) > c.Keep {
		if err := os.Remove(c.path(steps[0])); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		steps = steps[1:]
	}
	return nil
}

// Latest implements [Checkpointer].
func (c FileCheckpointer) Latest(ctx context.Context) (Checkpoint, io.ReadCloser, error) {
	steps, err := c.steps()
	if err != nil {
		return Checkpoint{}, nil, err
	}
	if len(steps) == 0 {
		return Checkpoint{}, nil, fmt.Errorf("%w in %s", ErrNoCheckpoint, c.Dir)
	}
	step := steps[len(steps)-1]
	path := c.path(step)
	f, err := os.Open(path)
	if err != nil {
		return Checkpoint{}, nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		f.Close()
		return Checkpoint{}, nil, err
	}
	return Checkpoint{Step: step, URI: "file://" + filepath.ToSlash(abs)}, f, nil
}

const stateMagic = "RTRNCKPT"

// WriteState writes the full training state: step and data position, the
// model (in the format of Model.WriteTo) and the optimizer state, each part
// with a CRC-32.
func (t *Trainer) WriteState(w io.Writer) error {
	e := newEncoder(w)
	e.bytes([]byte(stateMagic))
	e.u32(1) // format version
	e.i64(t.step)
	e.i64(t.pos.Epoch)
	e.i64(t.pos.Offset)
	e.checksum()
	t.model.encode(e)
	e.f32s(t.accDense)
	e.f32s(t.accEmb)
	e.checksum()
	return e.flush()
}

// ReadState replaces the trainer's state with one written by WriteState for
// a model of the same shape. On error the trainer is unchanged.
func (t *Trainer) ReadState(r io.Reader) error {
	if err := t.readState(r, -1); err != nil {
		return fmt.Errorf("trainer: read state: %w", err)
	}
	return nil
}

// readState reads a state, of step want unless want < 0.
func (t *Trainer) readState(r io.Reader, want int64) error {
	d := newDecoder(r)
	if string(d.bytes(len(stateMagic))) != stateMagic && d.err == nil {
		return errors.New("not a retrain training state")
	}
	if v := d.u32(); v != 1 && d.err == nil {
		return fmt.Errorf("state format version %d: want 1", v)
	}
	step := d.i64()
	pos := Position{Epoch: d.i64(), Offset: d.i64()}
	d.checksum()
	if d.err != nil {
		return d.err
	}
	m, err := decodeModel(d)
	if err != nil {
		return err
	}
	if !sameShape(m.cfg, t.model.cfg) {
		return fmt.Errorf("state of model %+v, trainer's is %+v", m.cfg, t.model.cfg)
	}
	accDense := make([]float32, len(m.dense))
	accEmb := make([]float32, len(m.emb))
	d.f32s(accDense)
	d.f32s(accEmb)
	d.checksum()
	if d.err != nil {
		return d.err
	}
	if step < 0 || pos.Epoch < 0 || pos.Offset < 0 {
		return fmt.Errorf("step %d at %+v: corrupt", step, pos)
	}
	if want >= 0 && step != want {
		return fmt.Errorf("holds step %d, not %d", step, want)
	}
	t.model, t.accDense, t.accEmb, t.step, t.pos = m, accDense, accEmb, step, pos
	return nil
}

func sameShape(a, b ModelConfig) bool {
	ta := make([]Transform, len(a.Dense))
	tb := make([]Transform, len(b.Dense))
	copy(ta, a.Transforms)
	copy(tb, b.Transforms)
	return a.Buckets == b.Buckets && a.Dim == b.Dim && slices.Equal(a.Dense, b.Dense) &&
		slices.Equal(ta, tb) && slices.Equal(a.Sparse, b.Sparse)
}

// restoreLatest restores ck's latest checkpoint if it is ahead of the
// trainer, and returns it.
func (t *Trainer) restoreLatest(ctx context.Context, ck Checkpointer) (Checkpoint, error) {
	info, rc, err := ck.Latest(ctx)
	if errors.Is(err, ErrNoCheckpoint) {
		return Checkpoint{}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("trainer: latest checkpoint: %w", err)
	}
	defer rc.Close()
	if info.Step <= t.step {
		return Checkpoint{}, nil
	}
	if err := t.readState(rc, info.Step); err != nil {
		return Checkpoint{}, fmt.Errorf("trainer: restore checkpoint %s: %w", info.URI, err)
	}
	return info, nil
}

// errUnread is what WriteState fails with when a Checkpointer returns
// without reading the whole state.
var errUnread = errors.New("checkpointer stopped reading the state")

// save streams the state to ck through a pipe, so the encoded state is never
// held in memory as a whole.
func (t *Trainer) save(ctx context.Context, ck Checkpointer) (string, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := t.WriteState(pw)
		pw.CloseWithError(err)
		done <- err
	}()
	uri, err := ck.Save(ctx, t.step, pr)
	pr.CloseWithError(errUnread) // unblocks WriteState if Save stopped early
	werr := <-done
	if err != nil {
		return "", fmt.Errorf("trainer: save checkpoint of step %d: %w", t.step, err)
	}
	if werr != nil {
		return "", fmt.Errorf("trainer: save checkpoint of step %d: %w", t.step, werr)
	}
	return uri, nil
}
