//go:build cgo

package nvmlhost

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/retrain-ml/retrain/gpu"
)

func eccOn(f *dgx, i int) {
	f.dev(i).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 3, nvml.SUCCESS }
}

func TestAllocatorContention(t *testing.T) {
	f := newDGX(t)
	eccOn(f, 3)
	bad := f.dev(3).UUID
	h := f.open(t)
	a := gpu.NewAllocator(h, gpu.ByUUID)

	var (
		mu       sync.Mutex
		held     = map[string]bool{}
		granted  atomic.Int64
		busy     atomic.Int64
		wg       sync.WaitGroup
		maxInUse int
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for g := range 48 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 25 {
				n := 1 + r.IntN(4)
				var (
					l   *gpu.Lease
					err error
				)
				if r.IntN(4) == 0 {
					l, err = a.TryAcquire(n)
					if errors.Is(err, gpu.ErrBusy) {
						busy.Add(1)
						continue
					}
				} else {
					l, err = a.Acquire(ctx, n)
				}
				if err != nil {
					t.Errorf("acquire %d: %v", n, err)
					return
				}
				granted.Add(1)
				ids := l.UUIDs()
				if len(ids) != n || strings.Count(l.VisibleDevices(), ",") != n-1 {
					t.Errorf("lease of %d: %v %q", n, ids, l.VisibleDevices())
				}
				mu.Lock()
				for _, id := range ids {
					if id == bad {
						t.Errorf("excluded GPU %s handed out", id)
					}
					if held[id] {
						t.Errorf("GPU %s handed out twice", id)
					}
					held[id] = true
				}
				maxInUse = max(maxInUse, len(held))
				mu.Unlock()

				time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)

				mu.Lock()
				for _, id := range ids {
					delete(held, id)
				}
				mu.Unlock()
				l.Release()
				l.Release() // twice is harmless
			}
		})
	}
	wg.Wait()
	if a.Leased() != 0 {
		t.Errorf("%d GPUs still leased after every release", a.Leased())
	}
	if maxInUse > 7 {
		t.Errorf("%d GPUs in use at once, only 7 are healthy", maxInUse)
	}
	if granted.Load() == 0 {
		t.Error("nothing granted")
	}
	t.Logf("%d leases granted, %d TryAcquire refused as busy, at most %d GPUs in use", granted.Load(), busy.Load(), maxInUse)
}

func TestAllocatorRefusesTooFewHealthy(t *testing.T) {
	f := newDGX(t)
	eccOn(f, 1)
	f.dev(6).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, true, false, nvml.SUCCESS }
	h := f.open(t)
	if n := len(gpu.Healthy(mustHealth(t, h))); n != 6 {
		t.Fatalf("%d healthy GPUs, want 6", n)
	}
	a := gpu.NewAllocator(h, gpu.ByUUID)

	// Waiting cannot help, so Acquire fails at once rather than at the
	// deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := a.Acquire(ctx, 7)
	if !errors.Is(err, gpu.ErrInsufficientGPUs) || time.Since(start) > 5*time.Second {
		t.Fatalf("Acquire(7) = %v after %v", err, time.Since(start))
	}
	for _, want := range []string{"want 7, the host has 6 healthy of 8", "GPU 1: ecc_uncorrected", "GPU 6: pending_row_remap"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := a.TryAcquire(8); !errors.Is(err, gpu.ErrInsufficientGPUs) {
		t.Errorf("TryAcquire(8) = %v", err)
	}
	l, err := a.Acquire(ctx, 6)
	if err != nil {
		t.Fatalf("Acquire(6): %v", err)
	}
	got := l.UUIDs()
	if slices.Contains(got, f.dev(1).UUID) || slices.Contains(got, f.dev(6).UUID) {
		t.Errorf("excluded GPU in lease %v", got)
	}
	l.Release()
	for _, n := range []int{0, -1} {
		if _, err := a.TryAcquire(n); err == nil {
			t.Errorf("TryAcquire(%d) succeeded", n)
		}
	}
}

func TestAllocatorFailFastOrWait(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	a := gpu.NewAllocator(h, gpu.ByUUID)
	all, err := a.TryAcquire(8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryAcquire(1); !errors.Is(err, gpu.ErrBusy) {
		t.Errorf("TryAcquire on a full host = %v, want ErrBusy", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := a.Acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire on a full host = %v, want the deadline", err)
	}
	done := make(chan *gpu.Lease)
	go func() {
		l, err := a.Acquire(context.Background(), 2)
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	waitFor(t, "the waiter to queue", queued(a, 1))
	// Someone is waiting: TryAcquire does not jump the queue.
	all.Release()
	l := <-done
	if len(l.UUIDs()) != 2 || a.Leased() != 2 {
		t.Errorf("lease %v, leased %d", l.UUIDs(), a.Leased())
	}
	l.Release()
}

// Waiters are served in order: a big request is not starved by small ones.
func TestAllocatorFIFO(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	a := gpu.NewAllocator(h, gpu.ByUUID)
	all, err := a.TryAcquire(8)
	if err != nil {
		t.Fatal(err)
	}
	big, small := make(chan *gpu.Lease, 1), make(chan *gpu.Lease, 1)
	go func() { l, _ := a.Acquire(context.Background(), 8); big <- l }()
	waitFor(t, "the big request to queue", queued(a, 1))
	go func() { l, _ := a.Acquire(context.Background(), 1); small <- l }()
	waitFor(t, "the small request to queue", queued(a, 2))
	if _, err := a.TryAcquire(1); !errors.Is(err, gpu.ErrBusy) {
		t.Errorf("TryAcquire with waiters = %v", err)
	}

	all.Release()
	lb := <-big
	select {
	case <-small:
		t.Fatal("the small request was served while the big one held every GPU")
	case <-time.After(20 * time.Millisecond):
	}
	lb.Release()
	ls := <-small
	if len(ls.UUIDs()) != 1 {
		t.Errorf("small lease %v", ls.UUIDs())
	}
	ls.Release()
}

// A waiter that gives up at the head of the queue lets the next one in.
func TestAllocatorCancelledHeadUnblocksNext(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	a := gpu.NewAllocator(h, gpu.ByUUID)
	seven, err := a.TryAcquire(7)
	if err != nil {
		t.Fatal(err)
	}
	defer seven.Release()
	ctx, cancel := context.WithCancel(context.Background())
	headErr := make(chan error, 1)
	go func() { _, err := a.Acquire(ctx, 2); headErr <- err }()
	waitFor(t, "the head to queue", queued(a, 1))
	next := make(chan *gpu.Lease, 1)
	go func() { l, _ := a.Acquire(context.Background(), 1); next <- l }()
	waitFor(t, "the next to queue", queued(a, 2))
	cancel()
	if err := <-headErr; !errors.Is(err, context.Canceled) {
		t.Errorf("head: %v", err)
	}
	select {
	case l := <-next:
		l.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("the next request stayed blocked behind a cancelled one")
	}
}

// Health is read at every allocation: a GPU that goes bad while leased is
// not handed out again, and a waiter that can no longer be served fails.
func TestAllocatorExcludesGPUThatTurnsBad(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	a := gpu.NewAllocator(h, gpu.ByUUID)
	all, err := a.TryAcquire(8)
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() { _, err := a.Acquire(context.Background(), 8); waiter <- err }()
	waitFor(t, "the waiter to queue", queued(a, 1))

	f.xid(2, 79)
	waitFor(t, "the XID to land", func() bool { return !mustHealth(t, h)[2].Healthy })
	all.Release()
	if err := <-waiter; !errors.Is(err, gpu.ErrInsufficientGPUs) || !strings.Contains(err.Error(), "GPU 2: xid") {
		t.Errorf("waiter for 8: %v", err)
	}
	l, err := a.TryAcquire(7)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(l.UUIDs(), f.dev(2).UUID) {
		t.Errorf("GPU with an XID handed out: %v", l.UUIDs())
	}
	l.Release()
}

func TestLeaseNaming(t *testing.T) {
	f := newDGX(t)
	eccOn(f, 0)
	h := f.open(t)

	l, err := gpu.NewAllocator(h, gpu.ByUUID).TryAcquire(2)
	if err != nil {
		t.Fatal(err)
	}
	want := f.dev(1).UUID + "," + f.dev(2).UUID
	if l.VisibleDevices() != want || !slices.Equal(l.Env(), []string{"CUDA_VISIBLE_DEVICES=" + want}) {
		t.Errorf("by UUID: %q %q", l.VisibleDevices(), l.Env())
	}
	if g := l.GPUs(); len(g) != 2 || g[0] != (gpu.GPU{Index: 1, UUID: f.dev(1).UUID}) {
		t.Errorf("GPUs: %+v", g)
	}

	l, err = gpu.NewAllocator(h, gpu.ByIndex).TryAcquire(3)
	if err != nil {
		t.Fatal(err)
	}
	if l.VisibleDevices() != "1,2,3" || !slices.Equal(l.Env(), []string{"CUDA_VISIBLE_DEVICES=1,2,3", "CUDA_DEVICE_ORDER=PCI_BUS_ID"}) {
		t.Errorf("by index: %q %q", l.VisibleDevices(), l.Env())
	}
}

func TestAllocatorOnClosedHost(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	a := gpu.NewAllocator(h, gpu.ByUUID)
	h.Close()
	if _, err := a.Acquire(context.Background(), 1); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Acquire on a closed host: %v", err)
	}
}

// queued reports, for waitFor, whether n requests wait in a's queue.
func queued(a *gpu.Allocator, n int) func() bool {
	return func() bool { return a.Waiting() == n }
}
