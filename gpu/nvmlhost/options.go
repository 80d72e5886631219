package nvmlhost

import "time"

// defaultIgnoredXIDs are XIDs that NVML reports as critical but that an
// application causes (graphics engine exception, page fault, a kernel that
// stopped, preemptive cleanup, video processor exception, ...): the list
// NVIDIA's Kubernetes device plugin skips. They are noted but do not
// exclude a GPU. An array, so that no caller can change the default.
var defaultIgnoredXIDs = [...]uint64{13, 31, 43, 45, 68, 109}

// Option configures Open.
type Option func(*options)

// config holds the options that do not depend on cgo; options (defined
// per build) embeds it.
type config struct {
	xidPollTimeout time.Duration
	ignoredXIDs    map[uint64]bool
}

func defaultConfig() config {
	c := config{xidPollTimeout: 500 * time.Millisecond}
	c.ignoredXIDs = make(map[uint64]bool, len(defaultIgnoredXIDs))
	for _, x := range defaultIgnoredXIDs {
		c.ignoredXIDs[x] = true
	}
	return c
}

// WithXIDPollTimeout sets how long one wait for XID events lasts. Close
// waits for at most one such wait to end. The default is 500ms; values
// under a millisecond are raised to one.
func WithXIDPollTimeout(d time.Duration) Option {
	return func(o *options) { o.xidPollTimeout = max(d, time.Millisecond) }
}

// WithIgnoredXIDs replaces the default list of application XIDs (13, 31,
// 43, 45, 68, 109): XIDs listed here are noted and do not exclude a GPU.
// With no arguments every critical XID excludes.
func WithIgnoredXIDs(xids ...uint64) Option {
	return func(o *options) {
		o.ignoredXIDs = make(map[uint64]bool, len(xids))
		for _, x := range xids {
			o.ignoredXIDs[x] = true
		}
	}
}
