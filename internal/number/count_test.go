package number

import "testing"

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 28572: "28,572",
		-1234567: "-1,234,567", 100000: "100,000", 9223372036854775807: "9,223,372,036,854,775,807"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}
