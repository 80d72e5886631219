package gate

import (
	"math"
	"testing"
)

// TestNumberString: messages show at most six significant digits, and
// figures that need fewer as they are.
func TestNumberString(t *testing.T) {
	for f, want := range map[float64]string{
		-0.23640000000000005: "-0.2364", 0.7663825254602966: "0.766383", 0.65: "0.65", 1.25: "1.25",
		2.509693053311793: "2.50969", 30000: "30000", 0: "0", 1e-7: "1e-07", 0.000123456789: "0.000123457",
		123456789: "1.23457e+08", math.NaN(): "NaN", math.Inf(-1): "-Inf",
	} {
		if got := Number(f).String(); got != want {
			t.Errorf("Number(%v).String() = %q, want %q", f, got, want)
		}
	}
}
