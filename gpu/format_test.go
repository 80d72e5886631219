package gpu

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestFormatNoGPUs(t *testing.T) {
	var buf bytes.Buffer
	if err := Format(&buf, Inventory{}); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "no GPUs (driver -)\n" {
		t.Errorf("%q", buf.String())
	}
}

func TestFormatUnavailableAndExcluded(t *testing.T) {
	inv := Inventory{DriverVersion: "535.104.05", CUDADriverVersion: 12020, Devices: []Device{
		{Index: 0, UUID: "GPU-a", Name: "Tesla T4", MemoryTotal: 16 << 30, MemoryUsed: 1 << 29, Utilization: Utilization{GPU: 3, Memory: 1},
			TemperatureC: 35, ECCUncorrected: 0, Processes: []Process{{PID: 1}},
			Health: Health{Healthy: true}, Unavailable: map[string]string{FieldPower: "ERROR_NOT_SUPPORTED"}},
		{Index: 1, UUID: "GPU-b", Name: "Tesla T4", MemoryTotal: 16 << 30, ECCUncorrected: 2,
			Health: Health{Reasons: []Reason{{CauseECC, "2 uncorrected ECC errors since the driver loaded"}, {CauseXID, "critical XID 79 x1"}}}},
	}}
	var buf bytes.Buffer
	if err := Format(&buf, inv); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 || lines[0] != "driver 535.104.05, CUDA 12.2, 2 GPUs, 1 healthy" {
		t.Fatalf("table:\n%s", buf.String())
	}
	if fields := strings.Fields(lines[3]); fields[len(fields)-1] != "ok" || !strings.Contains(lines[3], "0.5 GiB / 16.0 GiB") || !strings.Contains(lines[3], " - ") {
		t.Errorf("row 0: %q", lines[3])
	}
	if !strings.HasSuffix(lines[4], "EXCLUDED: 2 uncorrected ECC errors since the driver loaded; critical XID 79 x1") {
		t.Errorf("row 1: %q", lines[4])
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestFormatWriteError(t *testing.T) {
	if err := Format(failWriter{}, Inventory{Devices: []Device{{}}}); err == nil {
		t.Error("write error lost")
	}
}
