package trainer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFileCheckpointer(t *testing.T) {
	ctx := context.Background()
	ck := FileCheckpointer{Dir: filepath.Join(t.TempDir(), "ck"), Keep: 2}
	if _, _, err := ck.Latest(ctx); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("Latest of nothing: %v", err)
	}
	for _, step := range []int64{5, 10, 15} {
		uri, err := ck.Save(ctx, step, strings.NewReader(strings.Repeat("s", int(step))))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(uri, "file://") || !strings.HasSuffix(uri, "step-000000000015.ckpt") && step == 15 {
			t.Errorf("uri %s", uri)
		}
	}
	info, rc, err := ck.Latest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if info.Step != 15 || len(data) != 15 {
		t.Errorf("latest %+v with %d bytes", info, len(data))
	}
	entries, _ := os.ReadDir(ck.Dir)
	if len(entries) != 2 { // Keep 2, no temporary files left
		t.Errorf("%d files left", len(entries))
	}

	// A failed save leaves nothing behind.
	_, err = ck.Save(ctx, 20, io.MultiReader(strings.NewReader("part"), errReader{}))
	if err == nil {
		t.Fatal("failed read saved")
	}
	if info, _, _ := ck.Latest(ctx); info.Step != 15 {
		t.Errorf("latest after a failed save: %+v", info)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// stingyCheckpointer reads part of the state and claims success.
type stingyCheckpointer struct{ MemoryCheckpointer }

func (c *stingyCheckpointer) Save(ctx context.Context, step int64, r io.Reader) (string, error) {
	return c.MemoryCheckpointer.Save(ctx, step, io.LimitReader(r, 100))
}

func TestCheckpointErrors(t *testing.T) {
	exs, _ := newSynth(1, 100, 10).sample(2, 500)
	tr, _ := New(testConfig(1))
	if _, err := tr.Run(context.Background(), NewMemorySource(exs, 1, 0), &stingyCheckpointer{}, nil); err == nil ||
		!strings.Contains(err.Error(), "stopped reading") {
		t.Errorf("checkpointer reading part of the state: %v", err)
	}

	var state bytes.Buffer
	if err := tr.WriteState(&state); err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(state.Bytes())
	flipped[len(flipped)-100] ^= 1
	fresh, _ := New(testConfig(1))
	if err := fresh.ReadState(bytes.NewReader(flipped)); err == nil {
		t.Error("read a corrupt state")
	}
	if fresh.Step() != 0 {
		t.Error("a failed ReadState changed the trainer")
	}
	other := testConfig(1)
	other.Model.Dim = 2
	tr2, _ := New(other)
	if err := tr2.ReadState(bytes.NewReader(state.Bytes())); err == nil {
		t.Error("read the state of another model shape")
	}
	if err := fresh.ReadState(bytes.NewReader(state.Bytes())); err != nil || fresh.Step() != tr.Step() {
		t.Errorf("ReadState: %v, step %d", err, fresh.Step())
	}
}
