package nodetype

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/dags"
)

type probeWith struct {
	URL    string   `json:"url"`
	Tries  int      `json:"tries"`
	Labels []string `json:"labels"`
}

func TestNewDecodesWith(t *testing.T) {
	var got probeWith
	var gotIn Input
	typ := New(dags.NodeType{Name: "probe"}, func(_ context.Context, in Input, with probeWith) (map[string]any, error) {
		got, gotIn = with, in
		return map[string]any{"tries": with.Tries * 2}, nil
	})
	in := Input{Pipeline: "p", RunID: "r1", Node: "n", Type: "probe",
		With: map[string]any{"url": "http://x", "tries": float64(3), "labels": []any{"a", "b"}}}
	out, err := typ.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if got.URL != "http://x" || got.Tries != 3 || strings.Join(got.Labels, ",") != "a,b" {
		t.Errorf("decoded %+v", got)
	}
	if gotIn.Node != "n" || gotIn.RunID != "r1" {
		t.Errorf("input %+v", gotIn)
	}
	if out["tries"] != 6 {
		t.Errorf("outputs %v", out)
	}
}

func TestNewRefusesUndecodableWithWithoutRetry(t *testing.T) {
	called := false
	typ := New(dags.NodeType{Name: "probe"}, func(context.Context, Input, probeWith) (map[string]any, error) {
		called = true
		return nil, nil
	})
	// A reference resolved at run time can still hand a string to an int.
	_, err := typ.Run(context.Background(), Input{Node: "n", Type: "probe", With: map[string]any{"tries": "three"}})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != BadInput || !appErr.NonRetryable() {
		t.Fatalf("error %v, want a non-retryable %s", err, BadInput)
	}
	if !strings.Contains(err.Error(), "tries") || !strings.Contains(err.Error(), "node n") {
		t.Errorf("error %q does not name the node and field", err)
	}
	if called {
		t.Error("function ran on input that did not decode")
	}
}

func TestValidate(t *testing.T) {
	run := func(context.Context, Input) (map[string]any, error) { return nil, nil }
	tests := []struct {
		name string
		typ  Type
		want string // "" = valid
	}{
		{"valid", Type{NodeType: dags.NodeType{Name: "http_check", Fields: []dags.Field{{Name: "url", Type: dags.FieldString}}}, Run: run}, ""},
		{"valid with target", Type{NodeType: dags.NodeType{Name: "score", Target: "TeamScore.v2"}, Run: run}, ""},
		{"empty name", Type{Run: run}, "node type name"},
		{"upper-case name", Type{NodeType: dags.NodeType{Name: "HTTPCheck"}, Run: run}, "lower-case"},
		{"no function", Type{NodeType: dags.NodeType{Name: "x"}}, "no Run function"},
		{"workflow kind without a workflow", Type{NodeType: dags.NodeType{Name: "x", Kind: dags.KindWorkflow}, Run: run}, "runs as a child workflow but has none"},
		{"unknown kind", Type{NodeType: dags.NodeType{Name: "x", Kind: "job"}, Run: run}, `kind "job" is not supported`},
		{"bad target", Type{NodeType: dags.NodeType{Name: "x", Target: "a b"}, Run: run}, "activity type name"},
		{"unknown field type", Type{NodeType: dags.NodeType{Name: "x", Fields: []dags.Field{{Name: "n", Type: "integer"}}}, Run: run}, `unknown type "integer"`},
		{"field twice", Type{NodeType: dags.NodeType{Name: "x", Fields: []dags.Field{{Name: "n", Type: dags.FieldInt}, {Name: "n", Type: dags.FieldInt}}}, Run: run}, "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.typ.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
