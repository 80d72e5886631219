//go:build cgo

package nvmlhost

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/retrain-ml/retrain/gpu"
)

// xidWatcher collects critical XID events from one NVML event set in a
// goroutine. It follows NVIDIA's Kubernetes device plugin: a device whose
// events cannot be registered (other than not supported) is excluded, an
// event from a device it cannot identify or a failed wait excludes every
// GPU, and application XIDs are skipped.
type xidWatcher struct {
	set       nvml.EventSet
	timeoutMS uint32
	ignored   map[uint64]bool

	quit chan struct{}
	done chan struct{}

	mu sync.Mutex
	// byUUID holds each GPU's events; all holds reasons that apply to
	// every GPU.
	byUUID  map[string][]gpu.XIDEvent
	skipped map[string][]gpu.XIDEvent
	all     []gpu.Reason
}

// startXIDWatcher registers every device for critical XID events and
// starts waiting for them. It records registration problems on the
// devices, so it runs before the Host is shared. It returns nil when no
// device could be registered.
func startXIDWatcher(lib nvml.Interface, devices []*device, cfg config) *xidWatcher {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		for _, d := range devices {
			d.notes = append(d.notes, fmt.Sprintf("XID events are not watched: creating an event set: %v", ret))
		}
		return nil
	}
	registered := 0
	for _, d := range devices {
		if d.dev == nil {
			continue
		}
		supported, ret := d.dev.GetSupportedEventTypes()
		switch {
		case ret == nvml.ERROR_NOT_SUPPORTED, ret == nvml.SUCCESS && supported&nvml.EventTypeXidCriticalError == 0:
			d.notes = append(d.notes, "XID events not supported by this GPU")
			continue
		case ret != nvml.SUCCESS:
			d.static = append(d.static, gpu.Reason{Cause: gpu.CauseUnreadable, Detail: fmt.Sprintf("querying supported events: %v", ret)})
			continue
		}
		switch ret := d.dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret {
		case nvml.SUCCESS:
			registered++
		case nvml.ERROR_NOT_SUPPORTED:
			d.notes = append(d.notes, "XID events not supported by this GPU")
		default:
			d.static = append(d.static, gpu.Reason{Cause: gpu.CauseUnreadable, Detail: fmt.Sprintf("registering for XID events: %v", ret)})
		}
	}
	if registered == 0 {
		set.Free()
		return nil
	}
	w := &xidWatcher{
		set:       set,
		timeoutMS: uint32(cfg.xidPollTimeout.Milliseconds()),
		ignored:   cfg.ignoredXIDs,
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		byUUID:    make(map[string][]gpu.XIDEvent),
		skipped:   make(map[string][]gpu.XIDEvent),
	}
	go w.run()
	return w
}

func (w *xidWatcher) run() {
	defer close(w.done)
	for {
		select {
		case <-w.quit:
			return
		default:
		}
		e, ret := w.set.Wait(w.timeoutMS)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		default:
			// The device plugin marks every GPU unhealthy here: the state
			// of the GPUs is no longer known. Waiting again would spin.
			w.exclude(gpu.Reason{Cause: gpu.CauseUnreadable, Detail: fmt.Sprintf("waiting for XID events failed: %v", ret)})
			return
		}
		if e.EventType&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		ev := gpu.XIDEvent{XID: e.EventData, At: time.Now()}
		uuid := ""
		if e.Device != nil {
			if u, ret := e.Device.GetUUID(); ret == nvml.SUCCESS {
				uuid = u
			}
		}
		if uuid == "" {
			// NVML reports some XIDs for no particular GPU.
			if !w.ignored[ev.XID] {
				w.exclude(gpu.Reason{Cause: gpu.CauseXID, Detail: fmt.Sprintf("critical XID %d on an unidentified GPU at %s", ev.XID, ev.At.Format(time.RFC3339))})
			}
			continue
		}
		w.mu.Lock()
		if w.ignored[ev.XID] {
			w.skipped[uuid] = append(w.skipped[uuid], ev)
		} else {
			w.byUUID[uuid] = append(w.byUUID[uuid], ev)
		}
		w.mu.Unlock()
	}
}

func (w *xidWatcher) exclude(r gpu.Reason) {
	w.mu.Lock()
	w.all = append(w.all, r)
	w.mu.Unlock()
}

// report returns the exclusions and notes for one GPU.
func (w *xidWatcher) report(uuid string) ([]gpu.Reason, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reasons := append([]gpu.Reason(nil), w.all...)
	for _, s := range summarize(w.byUUID[uuid]) {
		reasons = append(reasons, gpu.Reason{Cause: gpu.CauseXID, Detail: "critical " + s})
	}
	var notes []string
	for _, s := range summarize(w.skipped[uuid]) {
		notes = append(notes, "application "+s+" (not a GPU fault)")
	}
	return reasons, notes
}

// summarize groups events by XID: "XID 79 x2, first at ...".
func summarize(evs []gpu.XIDEvent) []string {
	type agg struct {
		n     int
		first time.Time
	}
	by := make(map[uint64]*agg)
	var xids []uint64
	for _, e := range evs {
		a, ok := by[e.XID]
		if !ok {
			a = &agg{first: e.At}
			by[e.XID] = a
			xids = append(xids, e.XID)
		}
		a.n++
	}
	slices.Sort(xids)
	out := make([]string, 0, len(xids))
	for _, x := range xids {
		a := by[x]
		out = append(out, fmt.Sprintf("XID %d x%d since open, first at %s", x, a.n, a.first.Format(time.RFC3339)))
	}
	return out
}

// XIDEvents returns the critical XID events seen on the GPU with the given
// UUID since Open, ignored application XIDs included.
func (h *Host) XIDEvents(uuid string) []gpu.XIDEvent {
	if h.xid == nil {
		return nil
	}
	w := h.xid
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]gpu.XIDEvent(nil), w.byUUID[uuid]...)
	out = append(out, w.skipped[uuid]...)
	slices.SortStableFunc(out, func(a, b gpu.XIDEvent) int { return a.At.Compare(b.At) })
	return out
}

// stop ends the goroutine, waiting for its current Wait to time out, and
// frees the event set.
func (w *xidWatcher) stop() error {
	close(w.quit)
	<-w.done
	if ret := w.set.Free(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: freeing the XID event set: %w", ret)
	}
	return nil
}
