package worker

import (
	"testing"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/dags/examples"
)

// TestExamplesCompile checks the example pipelines against the real node
// types: fields, output references and each type's Check.
func TestExamplesCompile(t *testing.T) {
	lib := dags.NewLibrary(examples.FS)
	names, err := lib.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		file, data, err := lib.Find(name)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := dags.Parse(file, data)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if _, err := dags.Compile(spec, Types(), nil); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}
