package trainer

import (
	"sync"
	"sync/atomic"
)

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
