package dags

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// scoreSpec declares the outputs of a shell node; rest is appended to its
// node list.
const scoreSpec = `name: x
params:
  n: {type: int, default: 3}
nodes:
  - id: score
    type: shell
    with: {argv: [score]}
    outputs:
      auc: number
      model_uri: string
      epochs: int
      ok: bool
      tags: list
      meta: map
      extra: any
`

// checkErrorAt is checkError that also wants the column.
func checkErrorAt(t *testing.T, err error, want string, line, col int) {
	t.Helper()
	checkError(t, err, want, line)
	var list ErrorList
	if !errors.As(err, &list) {
		return
	}
	for _, e := range list {
		if strings.Contains(e.Msg, want) && e.Col != col {
			t.Errorf("error %q at column %d, want %d", e.Msg, e.Col, col)
		}
	}
}

func TestParseOutputs(t *testing.T) {
	s := mustParse(t, scoreSpec)
	n := s.Node("score")
	want := map[string]ParamType{
		"auc": ParamNumber, "model_uri": ParamString, "epochs": ParamInt, "ok": ParamBool,
		"tags": ParamList, "meta": ParamMap, "extra": ParamAny,
	}
	if !reflect.DeepEqual(n.Outputs, want) {
		t.Errorf("outputs %v, want %v", n.Outputs, want)
	}
	if n.OutputsPos != (Pos{8, 5}) || n.OutputKeyPos["model_uri"] != (Pos{10, 7}) {
		t.Errorf("positions %v %v", n.OutputsPos, n.OutputKeyPos)
	}
	// No declaration is nil; an empty one is not: it still limits the keys.
	s = mustParse(t, "name: x\nnodes:\n  - id: a\n    type: shell\n    outputs: {}\n  - id: b\n    type: shell\n    outputs:\n")
	if s.Node("a").Outputs == nil || len(s.Node("a").Outputs) != 0 || s.Node("b").Outputs == nil {
		t.Errorf("empty declarations: %v, %v", s.Node("a").Outputs, s.Node("b").Outputs)
	}
	if mustParse(t, exampleSpec).Node("a").Outputs != nil {
		t.Error("a node without outputs has a declaration")
	}
}

func TestParseOutputsErrors(t *testing.T) {
	const head = "name: x\nnodes:\n  - id: a\n    type: shell\n    with: {argv: [x]}\n"
	for _, tc := range []struct {
		name, src, want string
		line, col       int
	}{
		{"not a mapping", head + "    outputs: [auc]\n", `node "a" outputs must be a mapping, got list`, 6, 14},
		{"unknown type", head + "    outputs:\n      auc: numbr\n", `node "a" outputs: auc: unknown type "numbr"; use one of string, int, number, bool, list, map, any (did you mean "number"?)`, 7, 12},
		{"type not a string", head + "    outputs:\n      auc: [number]\n", `node "a" outputs: auc type must be a string, got list`, 7, 12},
		{"bad name", head + "    outputs:\n      a.b: number\n", `node "a" outputs: invalid output name "a.b": use letters, digits, '_' and '-', starting with a letter or '_'`, 7, 7},
		{"name starting with a digit", head + "    outputs:\n      1st: number\n", `invalid output name "1st"`, 7, 7},
		{"repeated key", head + "    outputs:\n      auc: number\n      auc: string\n", `node "a" outputs: key "auc" repeated`, 8, 7},
		{"misspelt field", head + "    ouputs: {auc: number}\n", `unknown field "ouputs" in node "a" (did you mean "outputs"?)`, 6, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tc.src))
			checkErrorAt(t, err, tc.want, tc.line, tc.col)
		})
	}
}

func TestValidateOutputs(t *testing.T) {
	reg := testRegistry(t)
	ok := []struct{ name, src string }{
		{"declared and fixed keys", scoreSpec + `  - id: use
    type: shell
    needs: [score]
    when: "${nodes.score.outputs.auc} > 0.5 && ${nodes.score.outputs.exit_code} == 0"
    with: {argv: [echo, "${nodes.score.outputs.auc}", "${nodes.score.outputs.model_uri}", "${nodes.score.outputs.stdout}"]}
`},
		{"open outputs without a declaration take any key", `name: x
nodes:
  - id: a
    type: shell
    with: {argv: [x]}
  - id: b
    type: shell
    needs: [a]
    with: {argv: ["${nodes.a.outputs.whatever}"]}
`},
		{"number and int into a string field, int into number", scoreSpec + `  - id: use
    type: train
    needs: [score]
    with: {epochs: "${nodes.score.outputs.epochs}", lr: "${nodes.score.outputs.auc}"}
  - id: use2
    type: shell
    needs: [score]
    with: {argv: ["${nodes.score.outputs.epochs}", "${nodes.score.outputs.ok}"], dir: "${nodes.score.outputs.auc}"}
  - id: use3
    type: train
    needs: [score]
    with: {epochs: 1, lr: "${nodes.score.outputs.epochs}"}
`},
		{"list into a string list, any anywhere, map into any", scoreSpec + `  - id: use
    type: shell
    needs: [score]
    with: {argv: "${nodes.score.outputs.tags}", dir: "${nodes.score.outputs.extra}"}
  - id: use2
    type: train
    needs: [score]
    with: {epochs: "${nodes.score.outputs.extra}", extra: "${nodes.score.outputs.meta}"}
`},
		{"text around a declared output is a string", scoreSpec + `  - id: use
    type: shell
    needs: [score]
    with: {argv: ["--tags=${nodes.score.outputs.tags}"]}
`},
		{"on_failure node declares and uses", scoreSpec + `on_failure:
  - id: undo
    type: shell
    compensates: score
    with: {argv: [rm, "${nodes.score.outputs.model_uri}"]}
    outputs: {removed: bool}
  - id: after
    type: shell
    compensates: score
    needs: [undo]
    when: "${nodes.undo.outputs.removed}"
    with: {argv: ["true"]}
`},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			if err := mustParse(t, tc.src).Validate(reg); err != nil {
				t.Fatal(err)
			}
		})
	}

	bad := []struct {
		name, src, want string
		line, col       int
	}{
		{"declaration on a fixed type", "name: x\nnodes:\n  - id: a\n    type: train\n    with: {epochs: 1}\n    outputs: {auc: number}\n",
			`node "a" (type train): outputs can only be declared for a node type whose outputs are open (such as command); type train's outputs are fixed: model, auc`, 6, 5},
		{"declaration on a type with no outputs", "name: x\nnodes:\n  - id: a\n    type: noop\n    outputs:\n      auc: number\n",
			`node "a" (type noop): outputs can only be declared for a node type whose outputs are open (such as command); type noop's outputs are not open`, 5, 5},
		{"declaring a fixed output", "name: x\nnodes:\n  - id: a\n    type: shell\n    with: {argv: [x]}\n    outputs:\n      auc: number\n      stdout: string\n",
			`node "a" (type shell): outputs: stdout is an output type shell always gives; declare only the ones the node adds`, 8, 7},
		{"undeclared key in with", scoreSpec + "  - id: use\n    type: shell\n    needs: [score]\n    with:\n      argv: [\"${nodes.score.outputs.acu}\"]\n",
			`node "use" references nodes.score.outputs.acu, but node score declares no output "acu" (did you mean "auc"?); its outputs are auc, epochs, exit_code, extra, meta, model_uri, ok, stderr, stdout, tags`, 20, 7},
		{"undeclared key in when", scoreSpec + "  - id: use\n    type: noop\n    needs: [score]\n    when: \"${nodes.score.outputs.loss} < 1\"\n",
			`node "use" references nodes.score.outputs.loss, but node score declares no output "loss"`, 19, 11},
		{"empty declaration", "name: x\nnodes:\n  - id: a\n    type: shell\n    with: {argv: [x]}\n    outputs: {}\n  - id: b\n    type: noop\n    needs: [a]\n    when: ${nodes.a.outputs.auc}\n",
			`node "b" references nodes.a.outputs.auc, but node a declares no output "auc"; its outputs are exit_code, stderr, stdout`, 10, 11},
		{"string into an int field", scoreSpec + "  - id: use\n    type: train\n    needs: [score]\n    with:\n      epochs: ${nodes.score.outputs.model_uri}\n",
			`node use: with.epochs: ${nodes.score.outputs.model_uri} is declared as string, want int`, 20, 7},
		{"number into an int field", scoreSpec + "  - id: use\n    type: train\n    needs: [score]\n    with:\n      epochs: ${nodes.score.outputs.auc}\n",
			`node use: with.epochs: ${nodes.score.outputs.auc} is declared as number, want int`, 20, 7},
		{"list into a string field", scoreSpec + "  - id: use\n    type: shell\n    needs: [score]\n    with:\n      argv: [x]\n      dir: ${nodes.score.outputs.tags}\n",
			`node use: with.dir: ${nodes.score.outputs.tags} is declared as list, want string`, 21, 7},
		{"map into a string list item", scoreSpec + "  - id: use\n    type: shell\n    needs: [score]\n    with:\n      argv: [x, \"${nodes.score.outputs.meta}\"]\n",
			`node use: with.argv[1]: ${nodes.score.outputs.meta} is declared as map, want string`, 20, 7},
		{"number into a duration", scoreSpec + "  - id: use\n    type: train\n    needs: [score]\n    with:\n      epochs: 1\n      budget: ${nodes.score.outputs.auc}\n",
			`node use: with.budget: ${nodes.score.outputs.auc} is declared as number, want duration`, 21, 7},
		{"string into a bool", scoreSpec + "  - id: use\n    type: train\n    needs: [score]\n    with:\n      epochs: 1\n      resume: ${nodes.score.outputs.model_uri}\n",
			`node use: with.resume: ${nodes.score.outputs.model_uri} is declared as string, want bool`, 21, 7},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			err := mustParse(t, tc.src).Validate(reg)
			checkErrorAt(t, err, tc.want, tc.line, tc.col)
		})
	}
}

// TestCompileOutputs: the plan node carries the declaration, and a plan
// without one has no outputs key, so plans recorded before stay the same.
func TestCompileOutputs(t *testing.T) {
	reg := testRegistry(t)
	plan, err := Compile(mustParse(t, scoreSpec+"  - id: b\n    type: shell\n    with: {argv: [x]}\n"), reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.Nodes[0].Outputs; got["auc"] != ParamNumber || got["extra"] != ParamAny || len(got) != 7 {
		t.Errorf("plan outputs %v", got)
	}
	b, err := json.Marshal(plan.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []map[string]any
	if err := json.Unmarshal(b, &nodes); err != nil {
		t.Fatal(err)
	}
	if o, _ := nodes[0]["outputs"].(map[string]any); o["model_uri"] != "string" {
		t.Errorf("JSON outputs %v", nodes[0]["outputs"])
	}
	if _, ok := nodes[1]["outputs"]; ok {
		t.Errorf("a node without a declaration has outputs in JSON: %s", b)
	}
	var back []PlanNode
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back[0].Outputs, plan.Nodes[0].Outputs) {
		t.Errorf("round trip: %v, %v", back[0].Outputs, err)
	}
	// The declaration is copied: editing the spec leaves the plan alone.
	s := mustParse(t, scoreSpec)
	plan, err = Compile(s, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Node("score").Outputs["auc"] = ParamString
	if plan.Nodes[0].Outputs["auc"] != ParamNumber {
		t.Error("plan shares the spec's declaration")
	}
}

func TestCheckOutputs(t *testing.T) {
	decl := map[string]ParamType{
		"auc": ParamNumber, "model_uri": ParamString, "epochs": ParamInt, "ok": ParamBool,
		"tags": ParamList, "meta": ParamMap, "extra": ParamAny,
	}
	good := map[string]any{
		"auc": 0.71, "model_uri": "s3://m", "epochs": float64(3), "ok": false,
		"tags": []any{}, "meta": map[string]any{}, "extra": nil, "undeclared": "x",
	}
	if err := CheckOutputs(decl, good); err != nil {
		t.Fatal(err)
	}
	if err := CheckOutputs(nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		key  string
		v    any
		want string
	}{
		{"string for a number", "auc", "n/a", `output auc is a string ("n/a"), want number`},
		{"numeric text is not a number", "auc", "0.7", `output auc is a string ("0.7"), want number`},
		{"null", "auc", nil, `output auc is null, want number`},
		{"fraction for an int", "epochs", 2.5, `output epochs is a number (2.5), want int`},
		{"bool for an int", "epochs", true, `output epochs is a bool (true), want int`},
		{"number for a string", "model_uri", float64(5), `output model_uri is a number (5), want string`},
		{"string for a bool", "ok", "true", `output ok is a string ("true"), want bool`},
		{"map for a list", "tags", map[string]any{"a": 1.0}, `output tags is a map ({"a":1}), want list`},
		{"list for a map", "meta", []any{"a"}, `output meta is a list (["a"]), want map`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := map[string]any{}
			for k, v := range good {
				out[k] = v
			}
			out[tc.key] = tc.v
			err := CheckOutputs(decl, out)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	err := CheckOutputs(map[string]ParamType{"auc": ParamNumber, "model_uri": ParamString, "z": ParamAny}, map[string]any{"auc": "n/a"})
	want := `output auc is a string ("n/a"), want number; output model_uri is missing, want string; output z is missing, want any`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestValidOutputName(t *testing.T) {
	for name, ok := range map[string]bool{
		"auc": true, "model_uri": true, "_x": true, "a-b": true, "A1": true,
		"": false, "1st": false, "a.b": false, "a b": false, "-a": false, "é": false,
	} {
		if ValidOutputName(name) != ok {
			t.Errorf("ValidOutputName(%q) = %t", name, !ok)
		}
		// The rule is the one references use.
		if _, err := parseRef("${nodes.n.outputs." + name + "}"); (err == nil) != ok && !strings.ContainsAny(name, "}") {
			t.Errorf("reference to %q: %v", name, err)
		}
	}
}
