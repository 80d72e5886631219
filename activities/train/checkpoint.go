package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/objects"

	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/trainer"
)

// s3Checkpointer keeps a builtin training run's states in the object store,
// one object per saved step under prefix (a folder key ending in /):
//
//	<prefix>step-000000000120.ckpt
//
// A Put is atomic, so a state is visible to Latest only once complete,
// however the worker dies. The newest keep states are kept.
type s3Checkpointer struct {
	store  *s3store.Store
	prefix string
	keep   int
}

const (
	trainStatePrefix = "step-"
	trainStateSuffix = ".ckpt"
)

func (c *s3Checkpointer) key(step int64) string {
	return fmt.Sprintf("%s%s%012d%s", c.prefix, trainStatePrefix, step, trainStateSuffix)
}

// Save implements trainer.Checkpointer.
func (c *s3Checkpointer) Save(ctx context.Context, step int64, state io.Reader) (string, error) {
	key := c.key(step)
	if _, err := c.store.Put(ctx, key, state); err != nil {
		return "", fmt.Errorf("save training state of step %d: %w", step, err)
	}
	c.prune(ctx)
	return objects.KeyURI(c.store, key), nil
}

// steps lists the saved steps, oldest first.
func (c *s3Checkpointer) steps(ctx context.Context) ([]int64, error) {
	var steps []int64
	for o, err := range c.store.List(ctx, c.prefix) {
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(o.Key, c.prefix)
		digits, ok := strings.CutPrefix(name, trainStatePrefix)
		if !ok {
			continue
		}
		digits, ok = strings.CutSuffix(digits, trainStateSuffix)
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(digits, 10, 64); err == nil {
			steps = append(steps, n)
		}
	}
	return steps, nil // listing is in key order, and keys are zero-padded
}

// prune deletes all but the newest states; failures only leave garbage,
// which checkpoint GC sweeps.
func (c *s3Checkpointer) prune(ctx context.Context) {
	if c.keep <= 0 {
		return
	}
	steps, err := c.steps(ctx)
	if err != nil || len(steps) <= c.keep {
		return
	}
	keys := make([]string, 0, len(steps)-c.keep)
	for _, s := range steps[:len(steps)-c.keep] {
		keys = append(keys, c.key(s))
	}
	_, _ = c.store.DeleteKeys(ctx, keys)
}

// Latest implements trainer.Checkpointer.
func (c *s3Checkpointer) Latest(ctx context.Context) (trainer.Checkpoint, io.ReadCloser, error) {
	steps, err := c.steps(ctx)
	if err != nil {
		return trainer.Checkpoint{}, nil, err
	}
	if len(steps) == 0 {
		return trainer.Checkpoint{}, nil, trainer.ErrNoCheckpoint
	}
	step := steps[len(steps)-1]
	body, _, err := c.store.Get(ctx, c.key(step))
	if errors.Is(err, s3store.ErrNotFound) {
		return trainer.Checkpoint{}, nil, trainer.ErrNoCheckpoint // pruned under us by a concurrent attempt
	}
	if err != nil {
		return trainer.Checkpoint{}, nil, err
	}
	return trainer.Checkpoint{Step: step, URI: objects.KeyURI(c.store, c.key(step))}, body, nil
}
