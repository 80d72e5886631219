package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
)

// streamData is n rows with many tied predictions (rounded to 1/200) and
// slices of unequal size.
func streamData(n int) ([]float64, []float32, []string) {
	r := rand.New(rand.NewPCG(11, 12))
	preds := make([]float64, n)
	labels := make([]float32, n)
	keys := make([]string, n)
	for i := range preds {
		p := math.Round(r.Float64()*200) / 200
		preds[i] = p
		if r.Float64() < 0.2+0.6*p {
			labels[i] = 1
		}
		keys[i] = "s" + strconv.Itoa(int(r.ExpFloat64()*2))
	}
	return preds, labels, keys
}

// The stream computes what the in-memory functions compute, whether all
// rows fit one run or are merged from many runs on disk: the same AUC and
// ROC curve to the bit, the same calibration bins and per-slice figures.
func TestMetricStreamMatchesInMemory(t *testing.T) {
	preds, labels, keys := streamData(20000)
	want, err := Evaluate(preds, labels)
	if err != nil {
		t.Fatal(err)
	}
	wantSlices, err := EvaluateSlices(preds, labels, keys)
	if err != nil {
		t.Fatal(err)
	}
	wantROC := ROC(preds, labels, DefaultROCPoints)
	for _, run := range []int{1 << 20, 3000, 64} {
		s := NewMetricStream(run, DefaultCalibrationBins)
		for i := 0; i < len(preds); i += 777 {
			j := min(i+777, len(preds))
			if err := s.Add(preds[i:j], labels[i:j], keys[i:j]); err != nil {
				t.Fatal(err)
			}
		}
		if run < len(preds) && len(s.runs) == 0 {
			t.Fatalf("run %d: no run was written to disk", run)
		}
		got, err := s.Finish(DefaultROCPoints)
		if err != nil {
			t.Fatal(err)
		}
		dir := s.dir
		s.Close()
		if dir != "" {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("run %d: Close left %s", run, dir)
			}
		}
		if !reflect.DeepEqual(got.Overall, want) {
			t.Errorf("run %d: overall %+v, want %+v", run, got.Overall, want)
		}
		if !reflect.DeepEqual(got.ROC, wantROC) {
			t.Errorf("run %d: ROC of %d points differs from ROC's %d", run, len(got.ROC), len(wantROC))
		}
		if w := CalibrationBins(preds, labels, DefaultCalibrationBins); !reflect.DeepEqual(got.Calibration, w) {
			t.Errorf("run %d: calibration %+v, want %+v", run, got.Calibration, w)
		}
		// %v, as DeepEqual never finds NaN (a one-class slice's AUC) equal.
		if g, w := fmt.Sprintf("%+v", got.Slices), fmt.Sprintf("%+v", wantSlices); g != w {
			t.Errorf("run %d: slices %+v, want %+v", run, got.Slices, wantSlices)
		}
	}
}

// Short curves are kept whole, as ROC keeps them; one class has no AUC.
func TestMetricStreamSmallCases(t *testing.T) {
	preds := []float64{0.9, 0.1, 0.5, 0.5, 0.3}
	labels := []float32{1, 0, 1, 0, 0}
	s := NewMetricStream(2, 3)
	defer s.Close()
	if err := s.Add(preds, labels, nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Finish(DefaultROCPoints)
	if err != nil {
		t.Fatal(err)
	}
	if want := ROC(preds, labels, DefaultROCPoints); !reflect.DeepEqual(got.ROC, want) {
		t.Errorf("ROC %v, want %v", got.ROC, want)
	}
	if got.Overall.AUC != AUC(preds, labels) || got.Slices != nil {
		t.Errorf("AUC %v, want %v; slices %v", got.Overall.AUC, AUC(preds, labels), got.Slices)
	}

	one := NewMetricStream(0, 10)
	one.Add([]float64{0.2, 0.4}, []float32{1, 1}, nil)
	res, err := one.Finish(10)
	if err != nil || !math.IsNaN(res.Overall.AUC) || res.ROC != nil {
		t.Errorf("one class: AUC %v, ROC %v, err %v; want NaN, none", res.Overall.AUC, res.ROC, err)
	}
	if _, err := NewMetricStream(0, 10).Finish(10); err == nil {
		t.Error("Finish with no rows succeeded")
	}
	if err := NewMetricStream(0, 10).Add([]float64{1.5}, []float32{1}, nil); err == nil {
		t.Error("a prediction above 1 was accepted")
	}
	if err := NewMetricStream(0, 10).Add([]float64{0.5}, []float32{2}, nil); err == nil {
		t.Error("label 2 was accepted")
	}
}
