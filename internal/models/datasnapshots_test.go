package models_test

import (
	"slices"
	"testing"

	"github.com/retrain-ml/retrain/internal/models"
)

// TestTrainedSnapshots: the snapshot ids versions trained on, whichever
// way they are written, and nothing else of DataSnapshots.
func TestTrainedSnapshots(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx := t.Context()
	register := func(name, content string, snaps ...string) {
		t.Helper()
		if _, err := reg.Register(ctx, name, artifacts(t, map[string]string{"m": content}), "", models.Meta{DataSnapshots: snaps}); err != nil {
			t.Fatal(err)
		}
	}
	register("ctr", "a", "4611686018427387905", "s3://bucket/splits/run-1/")
	register("ctr", "b", "ml.training@123")
	register("fraud", "c", "4611686018427387905", "snap-1", "-5")
	got, err := reg.TrainedSnapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Equal(got[4611686018427387905], []string{"ctr@v1", "fraud@v1"}) || !slices.Equal(got[123], []string{"ctr@v2"}) {
		t.Errorf("TrainedSnapshots = %v", got)
	}
}
