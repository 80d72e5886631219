package nodetest

import (
	"errors"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/nodetype"
)

// Run runs a node function as a Temporal activity, in the activity wrapper
// every node runs in, with heartbeat details of an earlier attempt when
// given.
func Run(t testing.TB, fn nodetype.Func, in nodetype.Input, heartbeat any) (map[string]any, error) {
	t.Helper()
	if in.Secrets == nil {
		in.Secrets = SpecSecrets(in.With)
	}
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(Quiet)) // the SDK's test logger prints every heartbeat
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(nodetype.Activity(fn), activity.RegisterOptions{Name: in.Type})
	if heartbeat != nil {
		env.SetHeartbeatDetails(heartbeat)
	}
	v, err := env.ExecuteActivity(in.Type, in)
	if err != nil {
		return nil, err
	}
	var res nodetype.Result
	if err := v.Get(&res); err != nil {
		return nil, err
	}
	return res.Outputs, nil
}

// SpecSecrets returns where with, taken as written in a spec, holds
// ${secret.NAME} references: what the workflow would send with it. Run
// uses it for an Input without Secrets, so tests write `with` as a spec
// does; a test of a reference that arrived in a value sets Secrets to an
// empty, non-nil list instead.
func SpecSecrets(with map[string]any) []dags.SecretRef {
	_, refs, err := dags.InterpolateSecrets(with, dags.Scope{})
	if err != nil {
		return nil
	}
	return refs
}

// ErrType returns the Temporal error type of err, "" if it has none.
func ErrType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

// Registry is a registry of the given node types, for tests that compile
// specs or check `with` blocks the way the validator does.
func Registry(t *testing.T, types ...nodetype.Type) *dags.Registry {
	t.Helper()
	nts := make([]dags.NodeType, len(types))
	for i, typ := range types {
		if err := typ.Validate(); err != nil {
			t.Fatal(err)
		}
		nts[i] = typ.NodeType
	}
	reg, err := dags.NewRegistry(nts...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
