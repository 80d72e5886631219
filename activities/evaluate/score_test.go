package evaluate

import (
	"bytes"
	"context"
	"math"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/activities/train"
	"github.com/retrain-ml/retrain/internal/trainer"
)

// The builtin scorer streams the rows in the split's file order; its
// figures are those of the whole dataset scored in memory in request id
// order, as evaluate did before: the AUC to the bit, the sums up to
// rounding.
func TestStreamedScoreIsTheInMemoryScore(t *testing.T) {
	f := newFixture(t)
	out, err := f.run(t, "ev", map[string]any{"candidate": f.builtin, "dataset": "train"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sd, err := split.Open(ctx, f.st, f.split)
	if err != nil {
		t.Fatal(err)
	}
	data, err := sd.Load(ctx, f.st, split.TrainDataset)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := objects.StoreKey(f.st, f.builtin)
	raw, err := objects.ReadObject(ctx, f.st, key+train.ModelFile)
	if err != nil {
		t.Fatal(err)
	}
	m, err := trainer.ReadModel(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	exs, err := data.Examples(m.Config().Dense, m.Config().Sparse)
	if err != nil {
		t.Fatal(err)
	}
	want, err := trainer.Evaluate(m.PredictBatch(exs, nil), data.Label)
	if err != nil {
		t.Fatal(err)
	}
	if out["auc"] != want.AUC || out["rows"] != float64(data.Len()) {
		t.Errorf("streamed AUC %v over %v rows, in memory %v over %d", out["auc"], out["rows"], want.AUC, data.Len())
	}
	for name, w := range map[string]float64{"log_loss": want.LogLoss, "accuracy": want.Accuracy, "calibration": want.Calibration} {
		if g := out[name].(float64); math.Abs(g-w) > 1e-12*math.Abs(w) {
			t.Errorf("streamed %s %v, in memory %v", name, g, w)
		}
	}
}
