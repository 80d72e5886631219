package train

import (
	"slices"
	"testing"
)

// TestThreadsEnv: ranks share the host's cores unless the spec or the
// worker set OMP_NUM_THREADS; one rank keeps PyTorch's own default.
func TestThreadsEnv(t *testing.T) {
	for _, c := range []struct {
		env              []string
		processes, cores int
		want             []string
	}{
		{nil, 1, 16, nil},
		{nil, 2, 16, []string{"OMP_NUM_THREADS=8"}},
		{nil, 3, 2, []string{"OMP_NUM_THREADS=1"}},
		{[]string{"PATH=/bin", "OMP_NUM_THREADS=4"}, 2, 16, nil},
		{[]string{"OMP_NUM_THREADSX=4"}, 4, 16, []string{"OMP_NUM_THREADS=4"}},
	} {
		if got := threadsEnv(c.env, c.processes, c.cores); !slices.Equal(got, c.want) {
			t.Errorf("threadsEnv(%q, %d, %d) = %q, want %q", c.env, c.processes, c.cores, got, c.want)
		}
	}
}
