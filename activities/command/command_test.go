package command

import (
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/nodetype"
)

// TestSchema: the field list comes from With, with its defaults and docs,
// and the outputs from Outputs.
func TestSchema(t *testing.T) {
	typ := Type(nodetest.Quiet)
	if err := typ.Validate(); err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	for _, f := range typ.NodeType.Fields {
		fields[f.Name] = true
		if f.Doc == "" {
			t.Errorf("field %s has no doc", f.Name)
		}
		switch f.Name {
		case "argv":
			if !f.Required || f.Type != dags.FieldStringList {
				t.Errorf("argv: %+v", f)
			}
		case "ok_exit_codes":
			if f.Default != "[0]" || f.Type != dags.FieldIntList {
				t.Errorf("ok_exit_codes default %q, want [0]", f.Default)
			}
		}
	}
	for _, name := range []string{"argv", "env", "dir", "ok_exit_codes", "outputs_from"} {
		if !fields[name] {
			t.Errorf("no field %s", name)
		}
	}
	if got := typ.NodeType.Outputs; len(got) != 3 || got[0] != "exit_code" || got[1] != "stdout" || got[2] != "stderr" {
		t.Errorf("outputs %v", got)
	}
	if !typ.NodeType.OpenOutputs {
		t.Error("the command type's outputs are not open: its $RETRAIN_OUTPUTS keys would fail validation")
	}
	if CommandType.Name != "command" || len(CommandType.Fields) != 5 {
		t.Errorf("CommandType %+v", CommandType)
	}
}

func run(t *testing.T, with map[string]any) (map[string]any, error) {
	t.Helper()
	return nodetest.Run(t, Type(nodetest.Quiet).Run, nodetype.Input{Pipeline: "p", RunID: "r", Node: "n", Type: Name, With: with}, nil)
}

// TestRunDefaults: without ok_exit_codes only 0 succeeds; with it, the
// codes listed do.
func TestRunDefaults(t *testing.T) {
	out, err := run(t, map[string]any{"argv": []any{"sh", "-c", "echo hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if out["exit_code"] != float64(0) || out["stdout"] != "hi" || out["stderr"] != "" {
		t.Errorf("outputs %v", out)
	}
	if _, err := run(t, map[string]any{"argv": []any{"sh", "-c", "exit 3"}}); err == nil {
		t.Error("exit 3 succeeded without ok_exit_codes")
	}
	out, err = run(t, map[string]any{"argv": []any{"sh", "-c", "exit 3"}, "ok_exit_codes": []any{0, 3}})
	if err != nil || out["exit_code"] != float64(3) {
		t.Errorf("exit 3 with ok_exit_codes [0, 3]: %v, %v", out, err)
	}
	if _, err := run(t, map[string]any{"argv": []any{"true"}, "ok_exit_codes": []any{}}); nodetest.ErrType(err) != errtype.BadInput {
		t.Errorf("empty ok_exit_codes: %v, want %s", err, errtype.BadInput)
	}
}

func TestCheck(t *testing.T) {
	reg := nodetest.Registry(t, Type(nodetest.Quiet))
	typ, _ := reg.Lookup(Name)
	for _, c := range []struct {
		with map[string]any
		ok   bool
	}{
		{map[string]any{"argv": []any{"true"}}, true},
		{map[string]any{"argv": []any{}}, false},
		{map[string]any{"argv": []any{"true"}, "ok_exit_codes": []any{}}, false},
		{map[string]any{"argv": []any{"true"}, "ok_exit_codes": []any{float64(1)}}, true},
	} {
		if err := typ.Check(c.with); (err == nil) != c.ok {
			t.Errorf("%v: error %v, want ok=%t", c.with, err, c.ok)
		}
	}
}
