package models

import (
	"slices"
	"testing"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
)

// TestSchema: the field lists come from the With structs, with their
// defaults and docs, and the outputs from the Outputs structs.
func TestSchema(t *testing.T) {
	types := Types(nil, quiet)
	want := map[string]struct {
		fields, outputs []string
		defaults        map[string]string
		required        []string
	}{
		DeployName: {
			fields: []string{"model", "dir", "version", "metrics", "data_snapshots", "labels", "alias", "reason", "webhooks", "webhook_attempts", "force"},
			outputs: []string{"model", "alias", "version", "ref", "previous_version", "moved", "forced", "seq", "checksum", "uri",
				"logical_date", "superseded_by", "superseded_date", "webhooks_ok", "webhooks_failed", "webhooks", "summary"},
			defaults: map[string]string{"alias": models.DefaultAlias, "webhook_attempts": "3"},
			required: []string{"model"},
		},
		RollbackModelName: {
			fields:   []string{"model", "alias", "to", "from", "reason", "force"},
			outputs:  []string{"model", "alias", "from", "to", "changed", "forced", "seq", "webhooks", "webhooks_failed", "summary"},
			defaults: map[string]string{"alias": models.DefaultAlias},
			required: []string{"model"},
		},
	}
	for _, typ := range types {
		if err := typ.Validate(); err != nil {
			t.Fatal(err)
		}
		nt := typ.NodeType
		w, ok := want[nt.Name]
		if !ok {
			t.Fatalf("unexpected type %s", nt.Name)
		}
		var names []string
		for _, f := range nt.Fields {
			names = append(names, f.Name)
			if f.Doc == "" {
				t.Errorf("%s.%s has no doc", nt.Name, f.Name)
			}
			if f.Default != w.defaults[f.Name] {
				t.Errorf("%s.%s default %q, want %q", nt.Name, f.Name, f.Default, w.defaults[f.Name])
			}
			if f.Required != slices.Contains(w.required, f.Name) {
				t.Errorf("%s.%s required %t", nt.Name, f.Name, f.Required)
			}
		}
		if !slices.Equal(names, w.fields) || !slices.Equal(nt.Outputs, w.outputs) {
			t.Errorf("%s: fields %v, outputs %v", nt.Name, names, nt.Outputs)
		}
	}
	if f := fieldOf(DeployType, "metrics"); f.Type != dags.FieldAny {
		t.Errorf("deploy.metrics %+v, want any", f)
	}
	if DeployType.Name != DeployName || RollbackModelType.Name != RollbackModelName || len(DeployType.Fields) == 0 {
		t.Errorf("DeployType %+v, RollbackModelType %+v", DeployType, RollbackModelType)
	}
}

func fieldOf(nt dags.NodeType, name string) dags.Field {
	for _, f := range nt.Fields {
		if f.Name == name {
			return f
		}
	}
	return dags.Field{}
}

// TestDeployDefaults: without alias a deploy moves production, and a
// webhook_attempts below 1 that only a reference could give is bad input.
func TestDeployDefaults(t *testing.T) {
	t.Parallel()
	m, reg, _ := newModels(t)
	ctx := t.Context()
	out, err := runDeploy(ctx, m, deployInput("run-1", "deploy", map[string]any{"model": "ctr", "dir": candidate(t, "w")}))
	if err != nil || out.Alias != models.DefaultAlias || out.Version != "v1" || out.Webhooks == nil {
		t.Fatalf("outputs %+v, %v", out, err)
	}
	if v, err := reg.Resolve(ctx, "ctr"); err != nil || v.Version != "v1" {
		t.Fatalf("%s = %+v, %v", models.DefaultAlias, v, err)
	}
	_, err = runDeploy(ctx, m, deployInput("run-2", "deploy", map[string]any{"model": "ctr", "version": "v1", "webhook_attempts": 0}))
	if nodetest.ErrType(err) != errtype.BadInput {
		t.Errorf("webhook_attempts 0: %v, want %s", err, errtype.BadInput)
	}
}
