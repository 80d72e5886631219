package dags_test

import (
	"fmt"
	"log"

	"github.com/retrain-ml/retrain/dags"
)

func Example() {
	reg, err := dags.NewRegistry(dags.NodeType{
		Name:    "command",
		Fields:  []dags.Field{{Name: "argv", Type: dags.FieldStringList, Required: true}},
		Outputs: []string{"exit_code", "stdout"},
	})
	if err != nil {
		log.Fatal(err)
	}
	spec, err := dags.Parse("hello.yaml", []byte(`
name: hello
params:
  who: {default: world}
nodes:
  - id: greet
    type: command
    with: {argv: [echo, "hello ${params.who}"]}
  - id: check
    type: command
    needs: [greet]
    when: "${nodes.greet.outputs.exit_code} == 0"
    with: {argv: [test, "${nodes.greet.outputs.stdout}"]}
`))
	if err != nil {
		log.Fatal(err)
	}
	plan, err := dags.Compile(spec, reg, map[string]any{"who": "retrain"})
	if err != nil {
		log.Fatal(err)
	}
	for _, n := range plan.Nodes {
		fmt.Println(n.ID, n.Needs, n.Retry.MaxAttempts, n.Timeout)
	}

	// At run time, the interpreter resolves references as nodes complete.
	sc := dags.Scope{
		Params:  plan.Params,
		Outputs: map[string]map[string]any{"greet": {"exit_code": 0.0, "stdout": "hello retrain\n"}},
	}
	with, _ := dags.Interpolate(plan.Nodes[0].With, sc)
	fmt.Printf("%q\n", with.(map[string]any)["argv"])
	run, _ := dags.EvalWhen(plan.Nodes[1].When, sc)
	fmt.Println("run check:", run)
	// Output:
	// greet [] 3 1h0m0s
	// check [greet] 3 1h0m0s
	// ["echo" "hello retrain"]
	// run check: true
}

func ExampleParse_errors() {
	_, err := dags.Parse("bad.yaml", []byte(`name: bad
nodes:
  - id: a
    type: command
    neds: [b]
`))
	fmt.Println(err)
	// Output:
	// bad.yaml:5:5: unknown field "neds" in node "a" (did you mean "needs"?)
}
