package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"
)

// Config configures a [Trainer]. Zero fields take the defaults documented
// on them.
type Config struct {
	Model ModelConfig
	// Seed fixes the initial weights.
	Seed uint64
	// Workers is the number of goroutines computing gradients in lockstep;
	// default GOMAXPROCS, at most Shards. It does not change the result.
	Workers int
	// Shards is the number of fixed chunks a global batch is cut into, and
	// of row partitions the update is split into; default 16. It bounds the
	// useful number of workers and is part of what fixes the result.
	Shards int
	// BatchSize is the global batch of one step, over all workers; default
	// 1024.
	BatchSize int
	// Steps is the step at which training ends; 0 trains until the Source
	// ends.
	Steps int64
	// LearningRate is Adagrad's; default 0.05.
	LearningRate float64
	// InitialAccumulator starts every Adagrad accumulator; default 0.1.
	InitialAccumulator float64
	// L2 regularizes the weights a step updates (not the bias); default 0.
	L2 float64
	// InitStd is the standard deviation of the initial embeddings; default
	// 0.01. Linear weights start at 0.
	InitStd float64
	// CheckpointEvery is the number of steps between checkpoints; 0 saves
	// only after the last step.
	CheckpointEvery int64
	// ProgressEvery is the number of steps between progress records;
	// default 1. Checkpoint steps and the last step are always reported.
	ProgressEvery int64
	Guard         Guard
}

func (c Config) withDefaults() Config {
	c.Model = c.Model.withDefaults()
	if c.Shards == 0 {
		c.Shards = 16
	}
	if c.Workers == 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	c.Workers = min(c.Workers, c.Shards)
	if c.BatchSize == 0 {
		c.BatchSize = 1024
	}
	if c.LearningRate == 0 {
		c.LearningRate = 0.05
	}
	if c.InitialAccumulator == 0 {
		c.InitialAccumulator = 0.1
	}
	if c.InitStd == 0 {
		c.InitStd = 0.01
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 1
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Workers < 1, c.Shards < 1, c.Shards > maxShards, c.BatchSize < 1:
		return fmt.Errorf("trainer: workers %d, shards %d, batch size %d: want at least 1 (shards at most %d)", c.Workers, c.Shards, c.BatchSize, maxShards)
	case c.Steps < 0, c.CheckpointEvery < 0, c.ProgressEvery < 1:
		return fmt.Errorf("trainer: steps %d, checkpoint every %d, progress every %d: want steps >= 0", c.Steps, c.CheckpointEvery, c.ProgressEvery)
	case !(c.LearningRate > 0), !(c.InitialAccumulator > 0), !(c.L2 >= 0), !(c.InitStd >= 0):
		return fmt.Errorf("trainer: learning rate %g, initial accumulator %g: want > 0; L2 %g, init std %g: want >= 0",
			c.LearningRate, c.InitialAccumulator, c.L2, c.InitStd)
	case !(c.Guard.MaxEmbNorm >= 0):
		return fmt.Errorf("trainer: max embedding norm %g: want >= 0", c.Guard.MaxEmbNorm)
	}
	return c.Model.validate()
}

// Trainer trains a [Model] by synchronous data-parallel Adagrad. It holds
// the whole training state: weights, optimizer state, step and data
// position. It is not safe for concurrent use.
type Trainer struct {
	cfg      Config
	model    *Model
	accDense []float32 // Adagrad accumulators of model.dense
	accEmb   []float32 // and of model.emb
	step     int64
	pos      Position

	// Buffers of a run, kept for the next.
	batch     []Example
	n         int      // examples in batch this step
	chunks    []*chunk // per chunk; pointers so workers' writes don't share cache lines
	scratch   [][]float32
	partMax   []float64 // per partition: the largest norm of a row it updated
	denseGrad []float32
}

// chunk is the gradient of one fixed chunk of a global batch: its sparse
// rows split into partitions, its dense gradient, its summed loss.
type chunk struct {
	parts []sparseAcc
	dense []float32
	loss  float64
	err   error
}

// New returns a trainer with freshly initialized weights.
func New(cfg Config) (*Trainer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newModel(cfg.Model)
	if err != nil {
		return nil, err
	}
	m.initEmbeddings(cfg.Seed, cfg.InitStd)
	t := &Trainer{
		cfg:      cfg,
		model:    m,
		accDense: make([]float32, len(m.dense)),
		accEmb:   make([]float32, len(m.emb)),
	}
	fill(t.accDense, float32(cfg.InitialAccumulator))
	fill(t.accEmb, float32(cfg.InitialAccumulator))
	return t, nil
}

func fill(s []float32, v float32) {
	for i := range s {
		s[i] = v
	}
}

// Model returns the model being trained. It changes while Run runs.
func (t *Trainer) Model() *Model { return t.model }

// Step returns the number of steps completed.
func (t *Trainer) Step() int64 { return t.step }

// Position returns the data position after the last step.
func (t *Trainer) Position() Position { return t.pos }

// Result summarizes a run.
type Result struct {
	Step        int64   // steps completed in all
	ResumedFrom int64   // the step of the checkpoint the run resumed from; 0 if none
	Examples    int64   // examples trained on by this run
	Loss        float64 // the last step's loss
	Checkpoint  string  // URI of the last checkpoint saved or resumed from
}

// Run trains until Config.Steps or the end of src, whichever is first.
//
// With a checkpointer, Run first restores its latest checkpoint if that is
// ahead of the trainer, saves a checkpoint every CheckpointEvery steps and
// after the last one, and reports each checkpoint's URI. progress, if not
// nil, is called on Run's goroutine with a record every ProgressEvery steps.
//
// Run stops with a [*DivergenceError] when the guard trips, and with ctx's
// error when ctx is done; the last checkpoint is then where to resume.
func (t *Trainer) Run(ctx context.Context, src Source, ck Checkpointer, progress func(Progress)) (Result, error) {
	var res Result
	if ck != nil {
		info, err := t.restoreLatest(ctx, ck)
		if err != nil {
			return res, err
		}
		if info.Step > 0 {
			res.ResumedFrom, res.Checkpoint = info.Step, info.URI
		}
	}
	if err := src.Seek(ctx, t.pos); err != nil {
		return res, fmt.Errorf("trainer: seek data to %+v: %w", t.pos, err)
	}
	t.prepare()
	p := t.startPool()
	defer p.stop()

	saved := res.ResumedFrom
	save := func() error {
		uri, err := t.save(ctx, ck)
		if err != nil {
			return err
		}
		saved, res.Checkpoint = t.step, uri
		return nil
	}
	var (
		since      = time.Now()
		sinceEx    int64
		sinceNorm  float64 // norms are >= 0, and a NaN one stops training
		pendingURI string
	)
	for t.cfg.Steps == 0 || t.step < t.cfg.Steps {
		if err := ctx.Err(); err != nil {
			return t.result(res), err
		}
		n, err := src.Next(ctx, t.batch)
		end := errors.Is(err, io.EOF)
		if err != nil && !end {
			return t.result(res), fmt.Errorf("trainer: read batch of step %d: %w", t.step+1, err)
		}
		if n == 0 {
			break
		}
		loss, norm, err := t.trainStep(p, n)
		if err != nil {
			return t.result(res), err
		}
		t.pos = src.Position()
		res.Examples += int64(n)
		res.Loss = loss
		sinceEx += int64(n)
		sinceNorm = max(sinceNorm, norm)
		last := end || t.step == t.cfg.Steps
		if ck != nil && (last || t.cfg.CheckpointEvery > 0 && t.step%t.cfg.CheckpointEvery == 0) {
			if err := save(); err != nil {
				return t.result(res), err
			}
			pendingURI = res.Checkpoint
		}
		if progress != nil && (last || pendingURI != "" || t.step%t.cfg.ProgressEvery == 0) {
			now := time.Now()
			progress(Progress{
				Step:           t.step,
				Loss:           loss,
				EmbMaxNorm:     sinceNorm,
				ExamplesPerSec: float64(sinceEx) / max(now.Sub(since).Seconds(), 1e-9),
				CheckpointURI:  pendingURI,
			})
			since, sinceEx, sinceNorm, pendingURI = now, 0, 0, ""
		}
		if end {
			break
		}
	}
	if ck != nil && t.step > 0 && saved != t.step {
		if err := save(); err != nil {
			return t.result(res), err
		}
	}
	return t.result(res), nil
}

func (t *Trainer) result(r Result) Result {
	r.Step = t.step
	return r
}

// prepare sizes the buffers of a run.
func (t *Trainer) prepare() {
	c, m := t.cfg, t.model
	if len(t.batch) != c.BatchSize {
		t.batch = make([]Example, c.BatchSize)
	}
	if len(t.chunks) != c.Shards {
		t.chunks = make([]*chunk, c.Shards)
		for i := range t.chunks {
			ch := &chunk{parts: make([]sparseAcc, c.Shards), dense: make([]float32, len(m.dense))}
			for p := range ch.parts {
				ch.parts[p].width = m.width
			}
			t.chunks[i] = ch
		}
		t.partMax = make([]float64, c.Shards)
		t.denseGrad = make([]float32, len(m.dense))
	}
	if len(t.scratch) != c.Workers {
		t.scratch = make([][]float32, c.Workers)
		for w := range t.scratch {
			// forward's scratch, then one row for a feature's gradient.
			t.scratch[w] = make([]float32, m.scratchLen()+m.width)
		}
	}
}
