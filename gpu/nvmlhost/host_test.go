//go:build cgo

package nvmlhost

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/retrain-ml/retrain/gpu"
)

// Without a driver, Init fails and any further NVML call would end the
// process: Open must return ErrNoDriver having called Init and nothing else.
func TestOpenNoDriver(t *testing.T) {
	for _, tc := range []struct {
		ret      nvml.Return
		noDriver bool
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, true},
		{nvml.ERROR_DRIVER_NOT_LOADED, true},
		{nvml.ERROR_NO_PERMISSION, false},
		{nvml.ERROR_UNKNOWN, false},
	} {
		t.Run(tc.ret.Error(), func(t *testing.T) {
			// A bare mock: any method but Init panics if called.
			bare := &mock.Interface{InitFunc: func() nvml.Return { return tc.ret }}
			// And a full one, whose call counters must stay at zero.
			full := newDGX(t)
			full.InitFunc = bare.InitFunc
			for _, lib := range []nvml.Interface{bare, full} {
				h, err := Open(WithLibrary(lib))
				if h != nil {
					t.Fatalf("Open returned a Host after a failed Init")
				}
				if errors.Is(err, gpu.ErrNoDriver) != tc.noDriver {
					t.Errorf("errors.Is(%v, gpu.ErrNoDriver) = %v, want %v", err, !tc.noDriver, tc.noDriver)
				}
				if !errors.Is(err, tc.ret) {
					t.Errorf("error %v does not wrap %v", err, tc.ret)
				}
			}
			if n := len(bare.InitCalls()); n != 1 {
				t.Errorf("Init called %d times", n)
			}
			if got := calls(bare, "Init"); len(got) > 0 {
				t.Errorf("NVML called after a failed Init: %v", got)
			}
			if got := calls(full.Server, "Init"); len(got) > 0 {
				t.Errorf("NVML called after a failed Init: %v", got)
			}
			for i := range full.Devices {
				if got := calls(&full.dev(i).Device); len(got) > 0 {
					t.Errorf("device %d called after a failed Init: %v", i, got)
				}
			}
			if got := calls(full.set); len(got) > 0 {
				t.Errorf("event set called after a failed Init: %v", got)
			}
		})
	}
}

func TestOpenShutsDownWhenDiscoveryFails(t *testing.T) {
	f := newDGX(t)
	f.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	h, err := Open(WithLibrary(f))
	if h != nil || !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Fatalf("Open = %v, %v", h, err)
	}
	if n := len(f.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times after a successful Init, want 1", n)
	}
}

func TestInventoryDGXH100(t *testing.T) {
	f := newDGX(t)
	f.dev(2).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 10 << 30}, {Pid: 4243, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
	}
	f.dev(5).GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	h := f.open(t)
	if h.Count() != 8 {
		t.Fatalf("Count = %d", h.Count())
	}
	inv, err := h.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if inv.DriverVersion != "550.54.15" || inv.CUDADriverVersion != 12040 || len(inv.Devices) != 8 {
		t.Fatalf("inventory: %+v", inv)
	}
	seen := map[string]bool{}
	for i, d := range inv.Devices {
		if d.Index != i || d.UUID != f.dev(i).UUID || seen[d.UUID] || !strings.HasPrefix(d.UUID, "GPU-") {
			t.Errorf("device %d: index %d uuid %q", i, d.Index, d.UUID)
		}
		seen[d.UUID] = true
		if d.Name != "NVIDIA H100 80GB HBM3" {
			t.Errorf("device %d: name %q", i, d.Name)
		}
		if d.MemoryTotal != 80<<30 || d.MemoryUsed != uint64(i)<<30 {
			t.Errorf("device %d: memory %d/%d", i, d.MemoryUsed, d.MemoryTotal)
		}
		if d.Utilization != (gpu.Utilization{GPU: 90, Memory: 40}) || d.TemperatureC != 40+uint32(i) || d.ECCUncorrected != 0 {
			t.Errorf("device %d: %+v", i, d)
		}
		if !d.Health.Healthy || len(d.Health.Reasons) != 0 || len(d.Health.Notes) != 0 {
			t.Errorf("device %d: health %+v", i, d.Health)
		}
		switch i {
		case 2:
			want := []gpu.Process{{PID: 4242, UsedMemory: 10 << 30}, {PID: 4243, UsedMemory: 1 << 30}}
			if !slices.Equal(d.Processes, want) {
				t.Errorf("processes %+v", d.Processes)
			}
		case 5:
			if d.PowerMilliwatts != 0 || d.Unavailable[gpu.FieldPower] == "" || len(d.Unavailable) != 1 {
				t.Errorf("unsupported power: %d %v", d.PowerMilliwatts, d.Unavailable)
			}
		default:
			if len(d.Processes) != 0 || d.Unavailable != nil || d.PowerMilliwatts != 300_000+1000*uint32(i) {
				t.Errorf("device %d: %+v", i, d)
			}
		}
	}

	var buf bytes.Buffer
	if err := gpu.Format(&buf, inv); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"driver 550.54.15, CUDA 12.4, 8 GPUs, 8 healthy",
		"IDX", "HEALTH",
		f.dev(7).UUID,
		"NVIDIA H100 80GB HBM3",
		"7.0 GiB / 80.0 GiB",
		"47C", "307W",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2+1+8 {
		t.Errorf("table has %d lines:\n%s", len(lines), out)
	}
	if row := lines[3+5]; !strings.Contains(row, " - ") {
		t.Errorf("unsupported power not shown as -: %q", row)
	}
}

func TestDeviceWithoutHandle(t *testing.T) {
	f := newDGX(t)
	inner := f.DeviceGetHandleByIndexFunc
	f.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 3 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return inner(i)
	}
	h := f.open(t)
	inv, err := h.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	d := inv.Devices[3]
	if d.Health.Healthy || d.UUID != "" || !slices.Equal(causes(d.Health), []gpu.Cause{gpu.CauseUnreadable}) || len(d.Unavailable) != 7 {
		t.Errorf("lost GPU: %+v", d)
	}
	var buf bytes.Buffer
	if err := gpu.Format(&buf, inv); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "EXCLUDED: no device handle: ERROR_GPU_IS_LOST") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestHealthExclusion(t *testing.T) {
	cases := []struct {
		name    string
		opts    []Option
		setup   func(f *dgx)
		event   func(f *dgx) // after Open
		gpu     int          // the GPU affected; -1: all of them
		want    []gpu.Cause
		detail  string // substring of the first reason
		healthy bool   // the affected GPU stays healthy (with a note)
		note    string
	}{
		{name: "uncorrected ECC errors", gpu: 1, want: []gpu.Cause{gpu.CauseECC}, detail: "2 uncorrected ECC errors",
			setup: func(f *dgx) {
				f.dev(1).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 2, nvml.SUCCESS }
			}},
		{name: "pending page retirement", gpu: 2, want: []gpu.Cause{gpu.CausePendingRetirement}, detail: "page retirement is pending",
			setup: func(f *dgx) {
				f.dev(2).GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
			}},
		{name: "pending row remap", gpu: 3, want: []gpu.Cause{gpu.CausePendingRemap}, detail: "row remap is pending",
			setup: func(f *dgx) {
				f.dev(3).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, true, false, nvml.SUCCESS }
			}},
		{name: "row remap failure", gpu: 4, want: []gpu.Cause{gpu.CauseRemapFailure}, detail: "row remapping failed",
			setup: func(f *dgx) {
				f.dev(4).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 512, false, true, nvml.SUCCESS }
			}},
		{name: "several causes", gpu: 0, want: []gpu.Cause{gpu.CauseECC, gpu.CausePendingRemap},
			setup: func(f *dgx) {
				f.dev(0).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 1, nvml.SUCCESS }
				f.dev(0).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, true, false, nvml.SUCCESS }
			}},
		{name: "critical XID", gpu: 5, want: []gpu.Cause{gpu.CauseXID}, detail: "critical XID 79 x2 since open",
			event: func(f *dgx) { f.xid(5, 79); f.xid(5, 79) }},
		{name: "application XID is noted", gpu: 6, healthy: true, note: "application XID 13 x1",
			event: func(f *dgx) { f.xid(6, 13) }},
		{name: "application XID excludes without the skip list", opts: []Option{WithIgnoredXIDs()}, gpu: 6, want: []gpu.Cause{gpu.CauseXID}, detail: "XID 13",
			event: func(f *dgx) { f.xid(6, 13) }},
		{name: "XID on no particular GPU", gpu: -1, want: []gpu.Cause{gpu.CauseXID}, detail: "critical XID 48 on an unidentified GPU",
			event: func(f *dgx) { f.xid(-1, 48) }},
		{name: "failed event wait", gpu: -1, want: []gpu.Cause{gpu.CauseUnreadable}, detail: "waiting for XID events failed",
			setup: func(f *dgx) {
				f.set.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST }
			}},
		{name: "lost GPU", gpu: 7, want: []gpu.Cause{gpu.CauseUnreadable, gpu.CauseUnreadable}, detail: "reading uncorrected ECC errors: ERROR_GPU_IS_LOST",
			setup: func(f *dgx) {
				f.dev(7).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
					return 0, nvml.ERROR_GPU_IS_LOST
				}
				f.dev(7).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_GPU_IS_LOST }
			}},
		{name: "XID registration fails", gpu: 1, want: []gpu.Cause{gpu.CauseUnreadable}, detail: "registering for XID events",
			setup: func(f *dgx) {
				f.dev(1).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_UNKNOWN }
			}},
		{name: "ECC not supported is no fault", gpu: 1, healthy: true,
			setup: func(f *dgx) {
				f.dev(1).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				f.dev(1).GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED }
			}},
		{name: "XID events not supported is no fault", gpu: 2, healthy: true, note: "XID events not supported",
			setup: func(f *dgx) {
				f.dev(2).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeSingleBitEccError, nvml.SUCCESS }
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newDGX(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			h := f.open(t, tc.opts...)
			if tc.event != nil {
				tc.event(f)
			}
			affected := func(i int) bool { return tc.gpu < 0 || i == tc.gpu }
			var hs []gpu.Health
			waitFor(t, "health to reflect the fault", func() bool {
				hs = mustHealth(t, h)
				for i, x := range hs {
					if affected(i) && tc.healthy != x.Healthy {
						return false
					}
					if affected(i) && tc.note != "" && !strings.Contains(strings.Join(x.Notes, "\n"), tc.note) {
						return false
					}
				}
				return true
			})
			for i, x := range hs {
				if !affected(i) {
					if !x.Healthy {
						t.Errorf("GPU %d excluded too: %+v", i, x)
					}
					continue
				}
				if tc.healthy {
					if len(x.Reasons) != 0 {
						t.Errorf("GPU %d: %+v", i, x)
					}
					continue
				}
				if !slices.Equal(causes(x), tc.want) {
					t.Errorf("GPU %d: causes %v, want %v (%+v)", i, causes(x), tc.want, x.Reasons)
				}
				if !strings.Contains(x.Reasons[0].Detail, tc.detail) {
					t.Errorf("GPU %d: reason %q lacks %q", i, x.Reasons[0].Detail, tc.detail)
				}
			}
		})
	}
}

func TestXIDEvents(t *testing.T) {
	f := newDGX(t)
	h := f.open(t)
	f.xid(2, 79)
	f.xid(2, 13)
	waitFor(t, "two events", func() bool { return len(h.XIDEvents(f.dev(2).UUID)) == 2 })
	evs := h.XIDEvents(f.dev(2).UUID)
	if evs[0].XID != 79 || evs[1].XID != 13 || evs[0].At.IsZero() {
		t.Errorf("events: %+v", evs)
	}
	if len(h.XIDEvents(f.dev(1).UUID)) != 0 {
		t.Error("events on the wrong GPU")
	}
}

// nvmlDeviceGetRemappedRows came with R450: on an older driver the symbol
// is missing and calling it would end the process.
func TestRemappedRowsNeedTheSymbol(t *testing.T) {
	for _, present := range []bool{false, true} {
		f := newDGX(t)
		f.LookupSymbolFunc = func(name string) error {
			if name == "nvmlDeviceGetRemappedRows" && !present {
				return errors.New("undefined symbol")
			}
			return nil
		}
		h := f.open(t)
		mustHealth(t, h)
		if got := len(f.dev(0).GetRemappedRowsCalls()) > 0; got != present {
			t.Errorf("symbol present=%v: GetRemappedRows called=%v", present, got)
		}
	}
}

func TestClose(t *testing.T) {
	f := newDGX(t)
	h, err := Open(WithLibrary(f), WithXIDPollTimeout(2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}

	// Readers racing Close either finish first or see ErrClosed.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := h.Health(); err != nil && !errors.Is(err, gpu.ErrClosed) {
					t.Errorf("Health: %v", err)
				}
			}
		})
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	before := len(calls(f.Server)) + len(calls(&f.dev(0).Device))
	waits := len(f.set.WaitCalls())
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := h.Inventory(); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Inventory after Close: %v", err)
	}
	if _, err := h.Health(); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Health after Close: %v", err)
	}
	if _, err := h.Utilization(f.dev(0).UUID); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Utilization after Close: %v", err)
	}
	if n := len(f.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times", n)
	}
	if n := len(f.set.FreeCalls()); n != 1 {
		t.Errorf("event set freed %d times", n)
	}
	if after := len(calls(f.Server)) + len(calls(&f.dev(0).Device)); after != before || len(f.set.WaitCalls()) != waits {
		t.Errorf("NVML called after Close")
	}
}

func TestNoEventSet(t *testing.T) {
	f := newDGX(t)
	f.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	h := f.open(t)
	hs := mustHealth(t, h)
	if !hs[0].Healthy || len(hs[0].Notes) != 1 || !strings.Contains(hs[0].Notes[0], "XID events are not watched") {
		t.Errorf("health: %+v", hs[0])
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestUtilization(t *testing.T) {
	f := newDGX(t)
	f.dev(1).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST }
	h := f.open(t)
	if u, err := h.Utilization(f.dev(0).UUID); err != nil || u != (gpu.Utilization{GPU: 90, Memory: 40}) {
		t.Errorf("Utilization = %v, %v", u, err)
	}
	if _, err := h.Utilization(f.dev(1).UUID); !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Errorf("lost GPU: %v", err)
	}
	if _, err := h.Utilization("GPU-nope"); err == nil {
		t.Error("unknown UUID accepted")
	}
}
