package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
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

// trainStep trains on t.batch[:n]: gradients of every chunk (phase 1),
// barrier, the dense update here, each partition's summed gradient applied
// by Adagrad (phase 2), barrier. It returns the batch's mean loss and the
// largest norm of an updated row.
func (t *Trainer) trainStep(p *pool, n int) (loss, norm float64, err error) {
	step := t.step + 1
	t.n = n
	p.run(phaseGrad, len(t.chunks))
	for _, ch := range t.chunks { // chunk order: the first bad example wins
		if ch.err != nil {
			t.discardGrads()
			return 0, 0, fmt.Errorf("trainer: step %d: %w", step, ch.err)
		}
		loss += ch.loss
	}
	loss /= float64(n)
	if err := t.cfg.Guard.CheckLoss(step, loss); err != nil {
		t.discardGrads()
		return loss, 0, err
	}

	// The dense gradient is a few floats per chunk: summed in chunk order
	// and applied here while the workers wait.
	clear(t.denseGrad)
	for _, ch := range t.chunks {
		for j, g := range ch.dense {
			t.denseGrad[j] += g
		}
	}
	lr, l2 := float32(t.cfg.LearningRate), float32(t.cfg.L2)
	nd := len(t.model.cfg.Dense)
	adagrad(t.model.dense[:nd], t.accDense[:nd], t.denseGrad[:nd], lr, l2)
	adagrad(t.model.dense[nd:], t.accDense[nd:], t.denseGrad[nd:], lr, 0)

	p.run(phaseUpdate, len(t.chunks))
	for _, m := range t.partMax {
		if m > norm || m != m {
			norm = m
		}
		if norm != norm {
			break
		}
	}
	t.step = step
	return loss, norm, t.cfg.Guard.CheckEmbNorm(step, norm)
}

func (t *Trainer) discardGrads() {
	for _, ch := range t.chunks {
		for p := range ch.parts {
			ch.parts[p].reset()
		}
	}
}

// gradChunk computes the gradient of the summed log loss over chunk c of the
// batch into t.chunks[c], using worker w's scratch.
func (t *Trainer) gradChunk(w, c int) {
	m := t.model
	ch := t.chunks[c]
	ch.loss, ch.err = 0, nil
	clear(ch.dense)
	lo, hi := c*t.n/len(t.chunks), (c+1)*t.n/len(t.chunks)
	nd, nf, width := len(m.cfg.Dense), len(m.cfg.Sparse), m.width
	scratch := t.scratch[w]
	sum := scratch[nf*width : nf*width+m.cfg.Dim]
	xs := scratch[nf*width+m.cfg.Dim : nf*width+m.cfg.Dim+nd]
	gv := scratch[len(scratch)-width:]
	for i := lo; i < hi; i++ {
		ex := &t.batch[i]
		if len(ex.Dense) != nd || len(ex.Sparse) > nf || !(ex.Label >= 0 && ex.Label <= 1) {
			ch.err = fmt.Errorf("example %d of the batch: %w", i, m.Validate(*ex))
			return
		}
		z := m.forward(ex, scratch)
		y := float64(ex.Label)
		ch.loss += logLoss(float64(z), y)
		g := float32(sigmoid(float64(z)) - y) // d loss / d score

		for j, x := range xs { // transformed, 0 when missing
			ch.dense[j] += g * x
		}
		ch.dense[nd] += g
		for f, ids := range ex.Sparse {
			if len(ids) == 0 {
				continue
			}
			// d score / d row of one of f's ids: [1, S - v_f] / len(ids).
			scale := g / float32(len(ids))
			pv := scratch[f*width : (f+1)*width]
			gv[0] = scale
			for j := 1; j < width; j++ {
				gv[j] = scale * (sum[j-1] - pv[j])
			}
			for _, id := range ids {
				r := m.bucket(f, id)
				dst := ch.parts[partition(r, len(ch.parts))].add(r)
				for j, v := range gv {
					dst[j] += v
				}
			}
		}
	}
}

// partition is the update partition of table row r: a function of r alone,
// so that each row's gradients from every chunk meet in one partition.
func partition(r, parts int) int {
	return int(uint64(uint32(r)*0x9e3779b1) * uint64(parts) >> 32)
}

// updatePartition sums partition p's gradients over the chunks in chunk
// order, into chunk 0's accumulator, and applies Adagrad to the rows.
func (t *Trainer) updatePartition(p int) {
	m := t.model
	w := m.width
	dst := &t.chunks[0].parts[p]
	for _, ch := range t.chunks[1:] {
		src := &ch.parts[p]
		for i, r := range src.rows {
			g := src.grads[i*w : (i+1)*w]
			d := dst.add(int(r))
			for j, v := range g {
				d[j] += v
			}
		}
		src.reset()
	}
	lr, l2 := float32(t.cfg.LearningRate), float32(t.cfg.L2)
	var mx float64
	for i, r := range dst.rows {
		lo, hi := int(r)*w, int(r+1)*w
		row := m.emb[lo:hi]
		adagrad(row, t.accEmb[lo:hi], dst.grads[i*w:(i+1)*w], lr, l2)
		if n := rowNorm(row); n > mx || n != n {
			mx = n
		}
	}
	dst.reset()
	t.partMax[p] = mx
}

// adagrad applies one Adagrad step with L2 to weights w, accumulators acc,
// gradients g.
func adagrad(w, acc, g []float32, lr, l2 float32) {
	acc, g = acc[:len(w)], g[:len(w)]
	for j, x := range w {
		gj := g[j] + l2*x
		a := acc[j] + gj*gj
		acc[j] = a
		w[j] = x - lr*gj/float32(math.Sqrt(float64(a)))
	}
}

// sparseAcc accumulates gradient rows for the table rows a chunk touches: an
// open-addressing index from row to position, the rows in first-touch
// order, and their gradients. After the first steps it has grown to size and
// accumulates without allocating.
type sparseAcc struct {
	width int
	slots []int32 // 0: empty; i+1: rows[i]
	shift uint    // 32 - log2(len(slots))
	rows  []uint32
	grads []float32 // len(rows) rows of width
}

// add returns the gradient row of table row r, zeroed when r is new.
func (a *sparseAcc) add(r int) []float32 {
	if 2*(len(a.rows)+1) > len(a.slots) {
		a.grow()
	}
	mask := len(a.slots) - 1
	// A multiplier other than partition's, whose top bits are nearly the
	// same for all rows of a partition.
	h := int(uint32(r) * 0x85ebca6b >> a.shift)
	for {
		s := a.slots[h]
		if s == 0 {
			a.rows = append(a.rows, uint32(r))
			a.slots[h] = int32(len(a.rows))
			n := len(a.grads)
			a.grads = append(a.grads, make([]float32, a.width)...)
			return a.grads[n : n+a.width]
		}
		if a.rows[s-1] == uint32(r) {
			i := int(s-1) * a.width
			return a.grads[i : i+a.width]
		}
		h = (h + 1) & mask
	}
}

func (a *sparseAcc) grow() {
	size := max(64, 2*len(a.slots))
	a.slots = make([]int32, size)
	a.shift = 32
	for s := size; s > 1; s >>= 1 {
		a.shift--
	}
	mask := size - 1
	for i, r := range a.rows {
		h := int(r * 0x85ebca6b >> a.shift)
		for a.slots[h] != 0 {
			h = (h + 1) & mask
		}
		a.slots[h] = int32(i + 1)
	}
}

func (a *sparseAcc) reset() {
	if len(a.rows) == 0 {
		return
	}
	clear(a.slots)
	a.rows = a.rows[:0]
	a.grads = a.grads[:0]
}

const (
	phaseGrad = iota
	phaseUpdate
)

// pool runs the two phases of a step on the trainer's workers. Worker 0 is
// the calling goroutine; the others sleep until woken for a phase.
//
// Tasks (chunks, partitions) are handed out through one atomic word, so a
// phase ends when its tasks are done, not when every worker has checked in:
// on a loaded machine a worker the OS has not scheduled yet only misses the
// tasks the others took meanwhile, instead of stalling the step until it
// wakes. Which worker computes a task never changes its result.
type pool struct {
	t        *Trainer
	wake     []chan struct{} // per sleeping worker, one pending wake-up at most
	finished chan struct{}   // a worker finished a phase's last task
	wg       sync.WaitGroup
	gen      uint64
	// state is the current phase: generation<<40 | phase<<32 | tasks<<16 |
	// next task. Taking a task is a compare-and-swap of the whole word, so a
	// worker holding a stale word can never take a task of a newer phase.
	state atomic.Uint64
	done  atomic.Int32 // tasks of the current phase completed
}

// maxShards bounds Config.Shards: the task counts must fit pool.state.
const maxShards = 1<<16 - 1

func (t *Trainer) startPool() *pool {
	p := &pool{t: t, wake: make([]chan struct{}, t.cfg.Workers-1), finished: make(chan struct{}, 1)}
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		p.wg.Add(1)
		go func(w int, wake <-chan struct{}) {
			defer p.wg.Done()
			for range wake {
				if p.drain(w) {
					p.finished <- struct{}{}
				}
			}
		}(i+1, p.wake[i])
	}
	return p
}

// run runs a phase to completion, which is the barrier between phases.
func (p *pool) run(phase, tasks int) {
	p.gen++
	p.done.Store(0)
	p.state.Store(p.gen<<40 | uint64(phase)<<32 | uint64(tasks)<<16)
	for _, c := range p.wake {
		select {
		case c <- struct{}{}:
		default: // already has a wake-up pending
		}
	}
	if !p.drain(0) {
		<-p.finished
	}
}

// drain runs tasks of the current phase until none is left to take, and
// reports whether it completed the phase's last task.
func (p *pool) drain(w int) bool {
	for {
		s := p.state.Load()
		next, tasks := int(s&0xffff), int(s>>16&0xffff)
		if next >= tasks {
			return false
		}
		if !p.state.CompareAndSwap(s, s+1) {
			continue
		}
		switch s >> 32 & 0xff {
		case phaseGrad:
			p.t.gradChunk(w, next)
		case phaseUpdate:
			p.t.updatePartition(next)
		}
		if p.done.Add(1) == int32(tasks) {
			return true
		}
	}
}

func (p *pool) stop() {
	for _, c := range p.wake {
		close(c)
	}
	p.wg.Wait()
}
