//go:build cgo

package nvmlhost

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/retrain-ml/retrain/gpu"
)

// dgx is a mock DGX H100 whose GPUs are all healthy, with an XID event set
// fed from a channel.
type dgx struct {
	*server.Server
	set    *mock.EventSet
	events chan nvml.EventData
}

// newDGX returns the mock. dgxh100.New leaves unset every NVML call beyond
// identity and memory (moq mocks panic on those), so the figures the
// package reads are set here, as an H100 reports them: page retirement is
// not supported (Hopper remaps rows instead).
func newDGX(t *testing.T) *dgx {
	t.Helper()
	srv := dgxh100.New()
	f := &dgx{Server: srv, events: make(chan nvml.EventData, 64)}
	f.set = &mock.EventSet{
		WaitFunc: func(timeoutMS uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-f.events:
				return e, nvml.SUCCESS
			case <-time.After(time.Duration(timeoutMS) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return f.set, nvml.SUCCESS }
	for i := range srv.Devices {
		d := f.dev(i)
		d.MemoryInfo.Used = uint64(i) << 30
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 90, Memory: 40}, nvml.SUCCESS
		}
		d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return 40 + uint32(d.Index), nvml.SUCCESS
		}
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 300_000 + 1000*uint32(d.Index), nvml.SUCCESS }
		d.GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, ctr nvml.EccCounterType) (uint64, nvml.Return) {
			if typ != nvml.MEMORY_ERROR_TYPE_UNCORRECTED || ctr != nvml.VOLATILE_ECC {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return 0, nvml.SUCCESS
		}
		d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
		}
		d.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
			if types != nvml.EventTypeXidCriticalError || set != f.set {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.SUCCESS
		}
	}
	return f
}

func (f *dgx) dev(i int) *server.Device { return f.Devices[i].(*server.Device) }

// open opens a Host on the mock, closed at the end of the test.
func (f *dgx) open(t *testing.T, opts ...Option) *Host {
	t.Helper()
	h, err := Open(append([]Option{WithLibrary(f), WithXIDPollTimeout(2 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// xid sends a critical XID event for GPU i (or for no GPU when i < 0).
func (f *dgx) xid(i int, code uint64) {
	e := nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: code}
	if i >= 0 {
		e.Device = f.Devices[i]
	}
	f.events <- e
}

// calls lists the moq methods of v (mock.Interface, mock.Device, ...) that
// were called, with their counts, ignoring the names in except. It reads
// every XxxCalls method, so no NVML entry point is missed.
func calls(v any, except ...string) []string {
	rv := reflect.ValueOf(v)
	var out []string
	for i := range rv.NumMethod() {
		m := rv.Type().Method(i)
		name, ok := strings.CutSuffix(m.Name, "Calls")
		if !ok || slices.Contains(except, name) {
			continue
		}
		mt := rv.Method(i).Type()
		if mt.NumIn() != 0 || mt.NumOut() != 1 || mt.Out(0).Kind() != reflect.Slice {
			continue
		}
		if n := rv.Method(i).Call(nil)[0].Len(); n > 0 {
			out = append(out, name+"×"+strings.Repeat("I", min(n, 5)))
		}
	}
	return out
}

// waitFor polls cond until it holds or a few seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func mustHealth(t *testing.T, h *Host) []gpu.Health {
	t.Helper()
	hs, err := h.Health()
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	return hs
}

func causes(h gpu.Health) []gpu.Cause {
	var out []gpu.Cause
	for _, r := range h.Reasons {
		out = append(out, r.Cause)
	}
	return out
}
