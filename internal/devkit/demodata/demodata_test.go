package demodata_test

import (
	"context"
	"math"
	"testing"

	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/lake"
)

func openLake(t *testing.T) *lake.Catalog {
	t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{DataDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

func TestWriteIsDeterministic(t *testing.T) {
	ctx := context.Background()
	cfg := demodata.Config{Rows: 3000, Days: 3, Seed: 7}
	var sums [2][5]string
	for i := range 2 {
		cat := openLake(t)
		res, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.TrainingRows != 3000 {
			t.Errorf("training rows %d", res.TrainingRows)
		}
		// 1000 users (the default floor) a day, over the days and the day before.
		if res.NoiseRows != 1000*4 || res.SignalRows != res.UserRows || res.NoiseRows != res.UserRows {
			t.Errorf("signal rows %d, noise rows %d, user rows %d: want one per user and day, 4000", res.SignalRows, res.NoiseRows, res.UserRows)
		}
		for j, name := range []string{"ml.training", "features.user_daily", "features.ad_daily", "features.user_signals", "features.noise_daily"} {
			tbl, err := cat.Load(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := lake.TableChecksum(ctx, tbl)
			if err != nil {
				t.Fatal(err)
			}
			sums[i][j] = sum.Digest
		}
		if _, err := demodata.Write(ctx, cat, cfg, demodata.DefaultTables, false, nil); err == nil {
			t.Error("second write without replace succeeded")
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("same seed, different data: %v vs %v", sums[0], sums[1])
	}
}

// TestLabelsFollowTheModel checks the labels are drawn from the model: the
// click rate matches the mean probability, and the probability separates
// clicks from non-clicks (the Bayes AUC is well above chance).
func TestLabelsFollowTheModel(t *testing.T) {
	g, err := demodata.NewGenerator(demodata.Config{Rows: 40000, Days: 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var clicks, n float64
	var probs []float64
	var labels []int32
	for !g.Done() {
		d := g.Next()
		if d.Impressions == nil {
			continue
		}
		for i, p := range d.Impressions.Prob {
			clicks += float64(d.Impressions.Label[i])
			n++
			probs = append(probs, p)
			labels = append(labels, d.Impressions.Label[i])
		}
	}
	mean := 0.0
	for _, p := range probs {
		mean += p
	}
	mean /= n
	if rate := clicks / n; math.Abs(rate-mean) > 0.01 || rate < 0.05 || rate > 0.6 {
		t.Errorf("click rate %.3f, mean probability %.3f", rate, mean)
	}
	auc := demodata.AUC(probs, labels)
	if auc < 0.65 || auc > 0.95 {
		t.Errorf("Bayes AUC %.3f: the model should be learnable but not trivial", auc)
	}
	t.Logf("click rate %.3f, Bayes AUC %.3f", clicks/n, auc)
}
