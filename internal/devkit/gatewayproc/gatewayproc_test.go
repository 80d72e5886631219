package gatewayproc

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestEnvironDropsGatewaySettings(t *testing.T) {
	t.Setenv("VGW_PORT", "1")
	t.Setenv("ROOT_ACCESS_KEY", "k")
	t.Setenv("GATEWAYPROC_KEPT", "yes")
	var kept bool
	for _, kv := range Environ() {
		if strings.HasPrefix(kv, "VGW_") || strings.HasPrefix(kv, "ROOT_") {
			t.Errorf("Environ keeps %s", kv)
		}
		kept = kept || kv == "GATEWAYPROC_KEPT=yes"
	}
	if !kept {
		t.Error("Environ dropped an unrelated variable")
	}
}

func TestRandomHex(t *testing.T) {
	a, b := RandomHex(8), RandomHex(8)
	if len(a) != 16 || a == b {
		t.Fatalf("RandomHex(8) = %q, %q", a, b)
	}
}

func TestHeadBufferKeepsTheStart(t *testing.T) {
	b := NewHeadBuffer(4)
	for _, s := range []string{"ab", "cd", "ef"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "abcd" {
		t.Fatalf("String() = %q, want %q", got, "abcd")
	}
}

func TestProbeXattr(t *testing.T) {
	err := ProbeXattr(t.TempDir())
	if runtime.GOOS != "linux" {
		if !errors.Is(err, ErrXattrNotProbed) {
			t.Fatalf("ProbeXattr = %v, want ErrXattrNotProbed", err)
		}
		return
	}
	// The temporary directory may or may not support them; either way
	// a failure must be recognisable.
	if err != nil && !errors.Is(err, ErrNoXattr) {
		t.Fatalf("ProbeXattr = %v, want nil or ErrNoXattr", err)
	}
}
