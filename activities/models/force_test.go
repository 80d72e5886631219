package models

import (
	"strings"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/dags"
)

// TestForceMustBeLiteral: force comes from the spec's author only: a
// ${params...} or any other ${...} is refused by validation at its line;
// a literal true or false is accepted.
func TestForceMustBeLiteral(t *testing.T) {
	reg := nodetest.Registry(t, Types(nil, quiet)...)
	for _, c := range []struct {
		name, force, want string
	}{
		{"param", `"${params.force}"`, `ship.yaml:11:7: node "deploy" (type deploy): with field "force" must be written literally`},
		{"output", `"${nodes.prep.outputs.forced}"`, `ship.yaml:11:7: node "deploy" (type deploy): with field "force" must be written literally`},
		{"expression", `"${params.force == 'yes'}"`, `ship.yaml:11:7:`},
		{"literal true", `true`, ``},
		{"literal false", `false`, ``},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := `name: ship
params:
  force: {type: bool, default: false}
nodes:
  - {id: prep, type: deploy, with: {model: ctr, version: v1}}
  - id: deploy
    type: deploy
    needs: [prep]
    with:
      model: ctr
      force: ` + c.force + `
      version: v2
on_failure:
  - id: undo
    type: rollback_model
    compensates: deploy
    with: {model: ctr, from: v2, to: v1, force: ` + c.force + `}
`
			spec, err := dags.Parse("ship.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			err = spec.Validate(reg)
			if c.want == "" {
				if err != nil {
					t.Fatalf("literal force refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			// The compensation's force is refused too, at its own line.
			if !strings.Contains(err.Error(), `ship.yaml:17:42: on_failure node "undo" (type rollback_model)`) {
				t.Errorf("rollback_model's force from a ${...} not refused at 17:42: %v", err)
			}
		})
	}
}
