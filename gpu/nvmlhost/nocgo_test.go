//go:build !cgo

package nvmlhost

import (
	"errors"
	"testing"

	"github.com/retrain-ml/retrain/gpu"
)

func TestOpenWithoutCgo(t *testing.T) {
	h, err := Open()
	if h != nil || !errors.Is(err, gpu.ErrNoDriver) {
		t.Fatalf("Open = %v, %v; want nil, ErrNoDriver", h, err)
	}
}
