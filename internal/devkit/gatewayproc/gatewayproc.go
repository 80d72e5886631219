// Package gatewayproc holds what the two ways of running a versitygw S3
// gateway in another process share: devstack/s3server (the dev stack's
// server, versitygw linked in and run as a child of the binary that links
// it) and internal/devkit/s3test (a server per test, run by a small program
// that links the same code). It provides the child's configuration and
// environment, random credentials, a bounded buffer for the child's output
// and a probe for the user extended attributes versitygw's POSIX backend
// keeps metadata in.
//
// It does not import versitygw, so that importing it links no gateway.
package gatewayproc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
)

// ErrNoXattr is wrapped by [ProbeXattr] when files in the probed directory
// cannot carry user extended attributes.
var ErrNoXattr = errors.New("extended attributes not supported")

// ErrXattrNotProbed is returned by [ProbeXattr] where the probe is not
// implemented (off Linux): support is unknown, and callers decide whether
// to assume it.
var ErrXattrNotProbed = errors.New("extended attributes are only probed on Linux")

// ChildEnv names the variable that carries a gateway child's
// [ChildConfig] as JSON; its presence makes s3server.Main serve instead of
// returning.
const ChildEnv = "RETRAIN_S3SERVER_CHILD"

// ChildConfig is what a parent tells a gateway child. The child serves
// until its standard input reaches end of file (the parent holds the other
// end of a pipe, so a parent killed with SIGKILL still stops it) or it gets
// SIGTERM.
type ChildConfig struct {
	Addr     string `json:"addr"`              // host:port to listen on
	Root     string `json:"root"`              // the POSIX backend's root: bucket b's object k is Root/b/k
	Versions string `json:"versions"`          // versitygw's versioning directory
	Sidecar  string `json:"sidecar,omitempty"` // metadata directory, where files have no user extended attributes
	Access   string `json:"access"`            // root access key
	Secret   string `json:"secret"`            // root secret key
}

// Environ returns this process's environment without versitygw's own
// settings (VGW_* and ROOT_*), which would otherwise change the gateway.
func Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VGW_") && !strings.HasPrefix(kv, "ROOT_") {
			env = append(env, kv)
		}
	}
	return env
}

// RandomHex returns n random bytes, hex-encoded, for credentials.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// HeadBuffer collects a process's output, safe for the process to write
// from another goroutine than the one reading it. It keeps only the start
// of the output, which says why a gateway failed, so that a gateway that
// runs long does not grow it without bound: writes are dropped once it
// holds Max bytes. Writes never fail.
type HeadBuffer struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

// NewHeadBuffer returns a buffer that keeps about the first max bytes
// written to it.
func NewHeadBuffer(max int) *HeadBuffer { return &HeadBuffer{Max: max} }

func (b *HeadBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() < b.Max {
		b.buf.Write(p)
	}
	return len(p), nil
}

// String returns the output kept so far.
func (b *HeadBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
