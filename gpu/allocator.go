package gpu

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// HealthReporter reports the health of every GPU of a host, in index
// order. *Host implements it.
type HealthReporter interface {
	Health() ([]Health, error)
}

// Naming says how a lease names its GPUs to CUDA.
type Naming int

const (
	// ByUUID names GPUs by UUID, which means the same GPU to every tool
	// whatever the enumeration order. The default.
	ByUUID Naming = iota
	// ByIndex names GPUs by NVML index. CUDA numbers GPUs fastest first
	// unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so Lease.Env sets that too.
	ByIndex
)

// Errors from an Allocator.
var (
	// ErrInsufficientGPUs: the host does not have that many healthy GPUs,
	// so waiting would not help.
	ErrInsufficientGPUs = errors.New("gpu: not enough healthy GPUs")
	// ErrBusy: TryAcquire found too few healthy GPUs free, or others
	// waiting before it.
	ErrBusy = errors.New("gpu: not enough free GPUs")
)

// Allocator hands healthy GPUs of one host to jobs and takes them back. A
// GPU is in at most one lease at a time, and never handed out while its
// health check excludes it: health is read on every allocation, so a GPU
// that turns bad (an XID, an ECC error) is not handed out again once
// released. It is safe for concurrent use.
//
// Waiting requests are served first come, first served: a request for many
// GPUs is not starved by a stream of small ones, and a request that does
// not fit keeps the ones behind it waiting.
type Allocator struct {
	src    HealthReporter
	naming Naming

	mu      sync.Mutex
	leased  map[string]bool // by UUID
	waiters list.List       // of *waiter, oldest first
}

type waiter struct {
	n     int
	ready chan struct{} // closed once lease or err is set
	lease *Lease
	err   error
}

// NewAllocator returns an allocator for the GPUs src reports.
func NewAllocator(src HealthReporter, naming Naming) *Allocator {
	return &Allocator{src: src, naming: naming, leased: make(map[string]bool)}
}

// Acquire leases n healthy GPUs, waiting until enough are free or ctx is
// done. It fails at once with ErrInsufficientGPUs when the host does not
// have n healthy GPUs at all.
func (a *Allocator) Acquire(ctx context.Context, n int) (*Lease, error) {
	return a.acquire(ctx, n, true)
}

// TryAcquire leases n healthy GPUs if they are free now and nobody is
// waiting, and fails with ErrBusy otherwise (or ErrInsufficientGPUs).
func (a *Allocator) TryAcquire(n int) (*Lease, error) {
	return a.acquire(context.Background(), n, false)
}

func (a *Allocator) acquire(ctx context.Context, n int, wait bool) (*Lease, error) {
	if n < 1 {
		return nil, fmt.Errorf("gpu: acquire %d GPUs: want at least 1", n)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.waiters.Len() == 0 {
		lease, err := a.grantLocked(n)
		if lease != nil || err != nil {
			a.mu.Unlock()
			return lease, err
		}
	}
	if !wait {
		free, waiting := a.freeLocked(), a.waiters.Len()
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: want %d, %d free, %d requests waiting", ErrBusy, n, free, waiting)
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	elem := a.waiters.PushBack(w)
	a.mu.Unlock()

	select {
	case <-w.ready:
		return w.lease, w.err
	case <-ctx.Done():
		a.mu.Lock()
		select {
		case <-w.ready:
			// Served just as ctx ended: give the GPUs back.
			a.mu.Unlock()
			if w.lease != nil {
				w.lease.Release()
			}
		default:
			front := a.waiters.Front() == elem
			a.waiters.Remove(elem)
			if front {
				// The next request may fit where this one did not.
				a.serveLocked()
			}
			a.mu.Unlock()
		}
		return nil, ctx.Err()
	}
}

// freeLocked counts healthy GPUs not leased; -1 when health is unknown.
func (a *Allocator) freeLocked() int {
	hs, err := a.src.Health()
	if err != nil {
		return -1
	}
	free := 0
	for _, h := range hs {
		if h.Healthy && h.UUID != "" && !a.leased[h.UUID] {
			free++
		}
	}
	return free
}

// grantLocked leases n GPUs if enough healthy ones are free. It returns
// (nil, nil) when the request must wait.
func (a *Allocator) grantLocked(n int) (*Lease, error) {
	hs, err := a.src.Health()
	if err != nil {
		return nil, fmt.Errorf("gpu: checking GPU health: %w", err)
	}
	var healthy, free []Health
	var excluded []string
	for _, h := range hs {
		switch {
		case !h.Healthy || h.UUID == "":
			excluded = append(excluded, describeExclusion(h))
		default:
			healthy = append(healthy, h)
			if !a.leased[h.UUID] {
				free = append(free, h)
			}
		}
	}
	if len(healthy) < n {
		detail := ""
		if len(excluded) > 0 {
			detail = " (excluded: " + strings.Join(excluded, "; ") + ")"
		}
		return nil, fmt.Errorf("%w: want %d, the host has %d healthy of %d%s", ErrInsufficientGPUs, n, len(healthy), len(hs), detail)
	}
	if len(free) < n {
		return nil, nil
	}
	l := &Lease{a: a, naming: a.naming}
	for _, h := range free[:n] {
		a.leased[h.UUID] = true
		l.gpus = append(l.gpus, GPU{Index: h.Index, UUID: h.UUID})
	}
	return l, nil
}

func describeExclusion(h Health) string {
	if len(h.Reasons) == 0 {
		return fmt.Sprintf("GPU %d: no UUID", h.Index)
	}
	rs := make([]string, len(h.Reasons))
	for i, r := range h.Reasons {
		rs[i] = r.String()
	}
	return fmt.Sprintf("GPU %d: %s", h.Index, strings.Join(rs, ", "))
}

// serveLocked grants waiting requests in order until one does not fit.
func (a *Allocator) serveLocked() {
	for e := a.waiters.Front(); e != nil; e = a.waiters.Front() {
		w := e.Value.(*waiter)
		lease, err := a.grantLocked(w.n)
		if lease == nil && err == nil {
			return
		}
		w.lease, w.err = lease, err
		a.waiters.Remove(e)
		close(w.ready)
	}
}

// Leased returns the number of GPUs now leased.
func (a *Allocator) Leased() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.leased)
}

// Waiting returns the number of Acquire calls waiting for GPUs.
func (a *Allocator) Waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waiters.Len()
}

// GPU names one leased GPU.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
}

// Lease is a set of GPUs held by one job until Release.
type Lease struct {
	a      *Allocator
	naming Naming
	gpus   []GPU
	once   sync.Once
}

// GPUs returns the leased GPUs, lowest index first.
func (l *Lease) GPUs() []GPU { return append([]GPU(nil), l.gpus...) }

// UUIDs returns the UUIDs of the leased GPUs, for a Sampler.
func (l *Lease) UUIDs() []string {
	out := make([]string, len(l.gpus))
	for i, g := range l.gpus {
		out[i] = g.UUID
	}
	return out
}

// VisibleDevices returns the value for CUDA_VISIBLE_DEVICES.
func (l *Lease) VisibleDevices() string {
	ids := make([]string, len(l.gpus))
	for i, g := range l.gpus {
		if l.naming == ByIndex {
			ids[i] = strconv.Itoa(g.Index)
		} else {
			ids[i] = g.UUID
		}
	}
	return strings.Join(ids, ",")
}

// Env returns the environment a job's process needs to see exactly the
// leased GPUs.
func (l *Lease) Env() []string {
	env := []string{"CUDA_VISIBLE_DEVICES=" + l.VisibleDevices()}
	if l.naming == ByIndex {
		// NVML indexes follow PCI bus order; CUDA's do only with this.
		env = append(env, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
	}
	return env
}

// Release gives the GPUs back. It may be called more than once.
func (l *Lease) Release() {
	if l == nil {
		return // no GPUs were leased (a gang that asked for none)
	}
	l.once.Do(func() {
		a := l.a
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, g := range l.gpus {
			delete(a.leased, g.UUID)
		}
		a.serveLocked()
	})
}
