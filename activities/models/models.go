package models

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/progenv"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// Names of the node types.
const (
	DeployName        = "deploy"
	RollbackModelName = "rollback_model"
)

// DeployType and RollbackModelType are the node types, for their names and
// schemas; Types returns them with their run functions.
var (
	DeployType        = (&Models{}).deployType().NodeType
	RollbackModelType = (&Models{}).rollbackModelType().NodeType
)

// CheckNames validates literal name fields of `with`.
func CheckNames(with map[string]any, fields ...string) error {
	for _, f := range fields {
		if s, ok := with[f].(string); ok && !dags.HasRef(s) {
			if err := models.ValidateName(f, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Models runs the steps that use the model registry.
type Models struct {
	Store  *s3store.Store // nil: no object store configured
	Logger *slog.Logger
	// HTTP sends webhooks; nil means a client with a 10s timeout.
	HTTP *http.Client
	// Env resolves ${secret.NAME} in webhook URLs and says where a local
	// dir may lie (AllowPaths).
	Env progenv.Policy

	// webhookBackoff is the wait before a webhook's second attempt,
	// doubled for each further one; tests shorten it.
	webhookBackoff time.Duration
	// afterRegister, when set, runs between registration and the alias
	// move: tests crash the process there.
	afterRegister func()
}

func (m *Models) registry() (*models.Registry, error) {
	if m.Store == nil {
		return nil, objects.NoStore()
	}
	return models.New(m.Store), nil
}

// actor is who moves an alias on behalf of a node: the run id lets a retry
// recognise its own earlier move.
func actor(in nodetype.Input) models.Actor {
	return models.Actor{Name: "retrain/" + in.Pipeline + "/" + in.Node, Run: in.RunID}
}

// modelsError maps registry errors to Temporal errors: bad names, missing
// versions and versions taken by other files will not change on retry.
func modelsError(err error) error {
	switch {
	case errors.Is(err, models.ErrInvalidName), errors.Is(err, models.ErrNotFound),
		errors.Is(err, models.ErrVersionExists), errors.Is(err, models.ErrNoPrevious),
		errors.Is(err, s3store.ErrInvalidKey):
		return nodetype.Permanent(errtype.BadInput, "%v", err)
	case errors.Is(err, models.ErrConcurrentMove):
		return nodetype.Permanent(errtype.ConcurrentMove, "%v", err)
	case errors.Is(err, models.ErrSuperseded):
		return nodetype.Permanent(errtype.Superseded, "%v", err)
	}
	return err
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Types returns the deploy and rollback_model node types; store is nil on a
// worker without an object store (their nodes then fail as bad input).
func Types(store *s3store.Store, logger *slog.Logger) []nodetype.Type {
	return TypesWith(Deps{Store: store, Logger: logger})
}

// Deps are what the deploy and rollback_model node types need from their
// worker.
type Deps struct {
	Store  *s3store.Store // nil: no object store configured
	Logger *slog.Logger
	Env    progenv.Policy // see Models.Env
}

// TypesWith returns the deploy and rollback_model node types with a
// worker's deps.
func TypesWith(d Deps) []nodetype.Type {
	m := &Models{Store: d.Store, Logger: d.Logger, Env: d.Env}
	return []nodetype.Type{m.deployType(), m.rollbackModelType()}
}

// Registry is the model registry on the worker's object store, for node
// types that move aliases the way deploy does (the canary); it fails as
// NoObjectStore without a store.
func (m *Models) Registry() (*models.Registry, error) { return m.registry() }

// Actor is who moves an alias on behalf of node in's run: a retry of the
// node recognises its own earlier moves by it.
func Actor(in nodetype.Input) models.Actor { return actor(in) }

// RegistryError maps a registry error to the node's error as deploy does:
// bad names and missing versions are BadInput, a concurrent move is
// ConcurrentMove; both are not retried.
func RegistryError(err error) error { return modelsError(err) }
