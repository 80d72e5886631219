package nodetype

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/dags"
)

type base struct {
	Seed int `json:"seed" default:"1" doc:"random seed"`
}

type trainLike struct {
	base
	Data       string            `json:"data" required:"true" doc:"the split"`
	Trainer    string            `json:"trainer" default:"builtin" doc:"builtin or command"`
	Dim        int               `json:"dim" default:"8"`
	L2         float64           `json:"l2" default:"1e-3"`
	Slices     bool              `json:"slices"`
	Dense      []string          `json:"dense"`
	Codes      []int             `json:"codes"`
	Env        map[string]string `json:"env"`
	Rates      map[string]float64
	Snapshot   any      `json:"snapshot_id"`
	Wait       string   `json:"wait" type:"duration"`
	MaxNull    *float64 `json:"max_null_rate"`
	Raw        json.RawMessage
	Skipped    int `json:"-"`
	unexported int
}

func TestSchemaFromStruct(t *testing.T) {
	got, err := Schema[trainLike]()
	if err != nil {
		t.Fatal(err)
	}
	want := []dags.Field{
		{Name: "seed", Type: dags.FieldInt, Doc: "random seed", Default: "1"},
		{Name: "data", Type: dags.FieldString, Required: true, Doc: "the split"},
		{Name: "trainer", Type: dags.FieldString, Doc: "builtin or command", Default: "builtin"},
		{Name: "dim", Type: dags.FieldInt, Default: "8"},
		{Name: "l2", Type: dags.FieldNumber, Default: "1e-3"},
		{Name: "slices", Type: dags.FieldBool},
		{Name: "dense", Type: dags.FieldStringList},
		{Name: "codes", Type: dags.FieldIntList},
		{Name: "env", Type: dags.FieldStringMap},
		{Name: "Rates", Type: dags.FieldAny},
		{Name: "snapshot_id", Type: dags.FieldAny},
		{Name: "wait", Type: dags.FieldDuration},
		{Name: "max_null_rate", Type: dags.FieldNumber},
		{Name: "Raw", Type: dags.FieldAny},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Schema:\n got %+v\nwant %+v", got, want)
	}
}

func TestSchemaRefusesBadTags(t *testing.T) {
	type badDefault struct {
		N int `json:"n" default:"eight"`
	}
	type requiredDefault struct {
		N int `json:"n" default:"8" required:"true"`
	}
	type unknownType struct {
		S string `json:"s" type:"date"`
	}
	for name, f := range map[string]func() error{
		"default that does not parse": func() error { _, err := Schema[badDefault](); return err },
		"required with a default":     func() error { _, err := Schema[requiredDefault](); return err },
		"unknown type override":       func() error { _, err := Schema[unknownType](); return err },
		"not a struct":                func() error { _, err := Schema[int](); return err },
	} {
		if err := f(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// New keeps the error for Validate, so a worker refuses the type at
	// startup instead of panicking.
	typ := New(dags.NodeType{Name: "bad"}, func(context.Context, Input, badDefault) (map[string]any, error) { return nil, nil })
	if err := typ.Validate(); err == nil || !strings.Contains(err.Error(), "default") {
		t.Errorf("Validate: %v", err)
	}
}

func TestDecodeWithAppliesDefaults(t *testing.T) {
	w, err := DecodeWith[trainLike](map[string]any{"data": "s3://b/split", "dim": float64(0)})
	if err != nil {
		t.Fatal(err)
	}
	// An explicit zero wins over the default; absent keys get theirs.
	if w.Data != "s3://b/split" || w.Dim != 0 || w.L2 != 1e-3 || w.Trainer != "builtin" || w.Seed != 1 {
		t.Errorf("decoded %+v", w)
	}
	if _, err := DecodeWith[trainLike](map[string]any{"dim": "eight"}); err == nil {
		t.Error("a string decoded into an int field")
	}
}

func TestOutputsFromStruct(t *testing.T) {
	type out struct {
		ModelURI string  `json:"model_uri"`
		Steps    int64   `json:"steps"`
		Loss     float64 `json:"loss,omitempty"`
		Hidden   string  `json:"-"`
	}
	names, err := OutputNames[out]()
	if err != nil || !reflect.DeepEqual(names, []string{"model_uri", "steps", "loss"}) {
		t.Fatalf("OutputNames = %v, %v", names, err)
	}
	if names, _ := OutputNames[map[string]any](); names != nil {
		t.Errorf("a map declared outputs %v", names)
	}
	m, err := Outputs(out{ModelURI: "s3://m", Steps: 3, Hidden: "x"})
	if err != nil {
		t.Fatal(err)
	}
	// The shape the workflow gets: JSON numbers, omitempty honoured.
	if !reflect.DeepEqual(m, map[string]any{"model_uri": "s3://m", "steps": float64(3)}) {
		t.Errorf("Outputs = %v", m)
	}
}

// TestNewDerivesTheNodeType: the registered type's fields and outputs are
// the structs', and the function gets typed input with defaults.
func TestNewDerivesTheNodeType(t *testing.T) {
	type with struct {
		URL     string `json:"url" required:"true" doc:"what to fetch"`
		Retries int    `json:"retries" default:"3"`
	}
	type out struct {
		Status int `json:"status"`
	}
	var got with
	typ := New(dags.NodeType{Name: "fetch"}, func(_ context.Context, _ Input, w with) (out, error) {
		got = w
		return out{Status: 200}, nil
	})
	if err := typ.Validate(); err != nil {
		t.Fatal(err)
	}
	nt := typ.NodeType
	if len(nt.Fields) != 2 || !nt.Fields[0].Required || nt.Fields[1].Default != "3" || !reflect.DeepEqual(nt.Outputs, []string{"status"}) {
		t.Fatalf("node type %+v", nt)
	}
	res, err := typ.Run(context.Background(), Input{Node: "f", Type: "fetch", With: map[string]any{"url": "http://x"}})
	if err != nil || res["status"] != float64(200) || got.Retries != 3 || got.URL != "http://x" {
		t.Fatalf("run: %v %v, with %+v", res, err, got)
	}
}
