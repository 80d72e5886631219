//go:build !cgo

package gpu

import (
	"errors"
	"testing"
)

func TestOpenWithoutCgo(t *testing.T) {
	h, err := Open()
	if h != nil || !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open = %v, %v; want nil, ErrNoDriver", h, err)
	}
}
