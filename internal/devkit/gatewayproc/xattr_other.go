//go:build !linux

package gatewayproc

// ProbeXattr returns [ErrXattrNotProbed]: the probe is only implemented on
// Linux.
func ProbeXattr(string) error { return ErrXattrNotProbed }
