// Package models is the `deploy` and `rollback_model` node types: they
// register a model version in the registry, move an alias to it or back, and
// tell webhooks about the move.
package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/objects"

	"go.temporal.io/sdk/activity"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/nodetype"
)

// CandidateWith is the part of a deploy's or a canary's `with` block that
// names the candidate and what its version records. Both node types
// embed it and register through [Models.Candidate], so a version records
// the same whichever of them put it in production (its data_snapshots
// keep its training data through table maintenance).
type CandidateWith struct {
	Model         string            `json:"model" required:"true" doc:"model name"`
	Dir           string            `json:"dir" doc:"folder of the candidate's artifact files, local or s3:// in the object store (a train node's model_uri), registered unless the same files are already a version"`
	Version       string            `json:"version" doc:"version name to register the files as (default: the next vN), or, without dir, the registered version to deploy"`
	Metrics       map[string]any    `json:"metrics" nested:"*:number" doc:"map of metric name to number, recorded with a new version"`
	DataSnapshots []string          `json:"data_snapshots" doc:"ids of the training data (checkpoint or table snapshots), recorded with a new version; table maintenance keeps the snapshots versions record"`
	Labels        map[string]string `json:"labels" doc:"labels recorded with a new version"`
}

// DeployWith is a deploy node's `with` block.
type DeployWith struct {
	CandidateWith
	Alias           string   `json:"alias" default:"production" doc:"alias to move"` // models.DefaultAlias
	Reason          string   `json:"reason" doc:"why, recorded in the alias history (default: the node and pipeline that deployed)"`
	Webhooks        []string `json:"webhooks" doc:"URLs to POST the new alias to (JSON) after the move; they may hold ${secret.NAME} (not in the host), resolved on the worker"`
	WebhookAttempts int      `json:"webhook_attempts" default:"3" doc:"attempts per webhook"`
	Force           bool     `json:"force" literal:"true" doc:"move the alias even when it names a version trained for a later logical date (by default a backfill's older date registers its version and leaves the alias); written literally (true), never from a ${...}; the move is recorded as forced"`
}

// DeployOutputs are a deploy node's outputs.
type DeployOutputs struct {
	Model   string `json:"model"`
	Alias   string `json:"alias"`
	Version string `json:"version"`
	Ref     string `json:"ref"` // model@version
	// PreviousVersion is what the alias named before this deploy moved
	// it ("" for its first move), or Version when it did not move it:
	// what a compensation moves it back to.
	PreviousVersion string `json:"previous_version"`
	Moved           bool   `json:"moved"`
	// Forced is set when force moved the alias to a version of an older
	// logical date than the one it named (recorded so in the history).
	Forced   bool   `json:"forced"`
	Seq      int64  `json:"seq"` // the alias history entry of the move
	Checksum string `json:"checksum"`
	URI      string `json:"uri"` // where the artifact files are
	// LogicalDate is the date of the data the version was trained for
	// (its run's logical date), as the registry records it.
	LogicalDate string `json:"logical_date"`
	// SupersededBy is set when the alias was left alone because it names
	// a version trained for a later logical date (SupersededDate).
	SupersededBy   string          `json:"superseded_by"`
	SupersededDate string          `json:"superseded_date"`
	WebhooksOK     int             `json:"webhooks_ok"`
	WebhooksFailed int             `json:"webhooks_failed"`
	Webhooks       []WebhookResult `json:"webhooks"`
	Summary        string          `json:"summary"` // one line for the run's node table
}

// summary says what the deploy did to the alias: "production: v1 → v2",
// "production: none → v1", "production already at v2".
func (o DeployOutputs) summary() string {
	s := fmt.Sprintf("%s %s: %s → %s", o.Model, o.Alias, cmpOr(o.PreviousVersion, "none"), o.Version)
	if o.SupersededBy != "" {
		return fmt.Sprintf("%s %s left at %s: superseded by %s for %s (%s registered, for %s)",
			o.Model, o.Alias, o.SupersededBy, o.SupersededBy, o.SupersededDate, o.Version, cmpOr(o.LogicalDate, "no date"))
	}
	if !o.Moved {
		s = fmt.Sprintf("%s %s already at %s", o.Model, o.Alias, o.Version)
	}
	if o.Forced {
		s += " (forced: " + o.Version + " is of an older date)"
	}
	if o.WebhooksFailed > 0 {
		s += fmt.Sprintf("; %d of %d webhooks failed", o.WebhooksFailed, len(o.Webhooks))
	}
	return s
}

// checkDeploy refuses, before any run, a deploy block no run could use;
// values holding ${...} are checked when the node runs.
func checkDeploy(with map[string]any) error {
	_, dir := with["dir"]
	_, version := with["version"]
	if !dir && !version {
		return errors.New("give dir (a candidate to register) or version (a registered version), or both")
	}
	if err := CheckNames(with, "model", "version", "alias"); err != nil {
		return err
	}
	if n, ok := with["webhook_attempts"].(float64); ok && n < 1 {
		return fmt.Errorf("webhook_attempts must be at least 1, got %v", n)
	}
	if hooks, ok := with["webhooks"].([]any); ok {
		for _, h := range hooks {
			s, ok := h.(string)
			if !ok {
				continue
			}
			if !dags.HasRef(s) {
				if err := checkWebhook(s); err != nil {
					return err
				}
			}
			if from, to := hostRange(s); strings.Contains(s[from:to], "${secret.") {
				return dags.AtField("webhooks", fmt.Errorf("webhook %q: a secret may not be in the host (the request, and a DNS lookup of it, would send it to whoever the name points at); put it in the path, query or user information", displayURL(s)))
			}
			if err := dags.CheckSecretURL(s); err != nil {
				return dags.AtField("webhooks", fmt.Errorf("webhook %w", err))
			}
		}
	}
	return nil
}

func (m *Models) deployType() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name: DeployName,
		Doc: "Register a model candidate (a folder of artifact files) in the registry unless it is already registered, " +
			"and move an alias (production) to it by compare-and-swap; then POST the new alias to webhooks: its own and the model's " +
			"(`retrain model webhooks`), whose deliveries the alias history records. " +
			"A retry finishes an interrupted deploy and never registers a second version. " +
			"A failed webhook is retried and reported in the outputs; it does not undo the deploy.",
		Check: checkDeploy,
	}, m.Deploy)
}

// Deploy runs a deploy node.
//
// Registration is idempotent (the registry finds the version that already
// holds the same files), and moving the alias to the version it already
// names records nothing, so a retry after a crash anywhere in between
// finishes the deploy: it registers no second version and records the move
// once.
func (m *Models) Deploy(ctx context.Context, in nodetype.Input, w DeployWith) (DeployOutputs, error) {
	metrics, err := metricValues(w.Metrics)
	if err != nil {
		return DeployOutputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if err := validateDeploy(w); err != nil {
		return DeployOutputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	reg, err := m.registry()
	if err != nil {
		return DeployOutputs{}, err
	}
	log := m.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node, "model", w.Model)

	v, err := m.candidate(ctx, in, w.CandidateWith, metrics, log)
	if err != nil {
		return DeployOutputs{}, err
	}
	if m.afterRegister != nil {
		m.afterRegister()
	}

	by := actor(in)
	reason := w.Reason
	if reason == "" {
		reason = fmt.Sprintf("deploy by node %s of pipeline %s", in.Node, in.Pipeline)
	}
	move, done, err := earlierMove(ctx, reg, w.Model, w.Alias, v.Version, by)
	if err != nil {
		return DeployOutputs{}, modelsError(err)
	}
	if !done {
		move, err = reg.Move(ctx, models.MoveRequest{Model: w.Model, Alias: w.Alias, To: v.Version, Force: w.Force, By: by, Reason: reason})
		if sup, ok := errors.AsType[*models.Superseded](err); ok {
			return m.superseded(v, w, sup, reg, log), nil
		}
		if err != nil {
			return DeployOutputs{}, modelsError(err)
		}
	}
	// Promote reports no change when the alias already named the version:
	// either an earlier attempt of this node moved it (then that move is
	// this deploy's), or it named the version before this deploy (then
	// there is nothing for a compensation to undo).
	moved := move.Changed || move.Actor == by && move.To == v.Version
	previous := move.From
	if !moved {
		previous = v.Version
	}
	log.Info("deployed", "alias", w.Alias, "version", v.Version, "previous", previous, "moved", moved, "seq", move.Seq)

	out := DeployOutputs{
		Model: w.Model, Alias: w.Alias, Version: v.Version, Ref: v.Ref(), PreviousVersion: previous,
		Moved: moved, Forced: moved && move.Forced, Seq: move.Seq, Checksum: v.Checksum, URI: reg.URI(v).String(), LogicalDate: v.LogicalDate(),
	}
	ev := webhookEvent{
		Model: w.Model, Alias: w.Alias, Version: v.Version, PreviousVersion: previous, Checksum: v.Checksum,
		URI: out.URI, Seq: move.Seq, Pipeline: in.Pipeline, Run: in.RunID, Time: move.Time,
		Kind: move.Kind, By: move.Actor.Name, Reason: move.Reason,
	}
	out.Webhooks = m.notify(ctx, w, ev, log)
	if moved {
		// The model's own webhooks hear the move too (those the node
		// lists were just told), and the alias history records them all.
		out.Webhooks = m.notifyModel(ctx, in, move, ev, out.Webhooks, w.Webhooks)
	}
	for _, r := range out.Webhooks {
		if r.Error == "" {
			out.WebhooksOK++
		}
	}
	out.WebhooksFailed = len(out.Webhooks) - out.WebhooksOK
	out.Summary = out.summary()
	return out, nil
}

// Candidate is the version a deploy or canary node acts on: the files of
// w.Dir registered as a version of w.Model with its metrics, data
// snapshots, labels and the run's logical time (or found, if the same
// files already are one), or the registered w.Version. Bad input fails as
// BadInput.
func (m *Models) Candidate(ctx context.Context, in nodetype.Input, w CandidateWith) (models.Version, error) {
	metrics, err := metricValues(w.Metrics)
	if err != nil {
		return models.Version{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	return m.candidate(ctx, in, w, metrics, m.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node, "model", w.Model))
}

func (m *Models) candidate(ctx context.Context, in nodetype.Input, w CandidateWith, metrics map[string]float64, log *slog.Logger) (models.Version, error) {
	reg, err := m.registry()
	if err != nil {
		return models.Version{}, err
	}
	var v models.Version
	if w.Dir != "" && !strings.HasPrefix(w.Dir, "s3://") {
		// A starter must not copy what it likes off the worker into the store.
		if err := m.Env.CheckPath("dir", w.Dir); err != nil {
			return models.Version{}, err
		}
	}
	if w.Dir != "" {
		dir, cleanup, err := objects.LocalDir(ctx, m.Store, w.Dir)
		if err != nil {
			return models.Version{}, err
		}
		defer cleanup()
		artifacts, err := models.DirArtifacts(dir)
		if err != nil {
			return models.Version{}, nodetype.Permanent(errtype.BadInput, "dir: %v", err)
		}
		if len(artifacts) == 0 {
			return models.Version{}, nodetype.Permanent(errtype.BadInput, "dir %s holds no files", w.Dir)
		}
		v, err = reg.Register(ctx, w.Model, artifacts, w.Version, models.Meta{
			Metrics: metrics, DataSnapshots: w.DataSnapshots, PipelineRun: in.RunID, Labels: w.Labels,
			LogicalTime: in.LogicalTime,
		})
		if err != nil {
			return models.Version{}, modelsError(err)
		}
		log.Info("candidate registered", "version", v.Version, "checksum", v.Checksum)
	} else {
		if v, err = reg.Get(ctx, w.Model, w.Version); err != nil {
			return models.Version{}, modelsError(err)
		}
	}
	return v, nil
}

// superseded is a deploy's outputs when the alias names a version trained
// for a later logical date: the candidate is registered, the alias and
// the serving system are left as they are (no webhook: nothing changed),
// and a compensation has nothing to undo.
func (m *Models) superseded(v models.Version, w DeployWith, sup *models.Superseded, reg *models.Registry, log *slog.Logger) DeployOutputs {
	log.Info("not deployed: superseded", "alias", w.Alias, "version", v.Version, "logical_date", v.LogicalDate(),
		"superseded_by", sup.By.Version, "superseded_date", sup.By.LogicalDate())
	out := DeployOutputs{
		Model: w.Model, Alias: w.Alias, Version: v.Version, Ref: v.Ref(), PreviousVersion: v.Version,
		Checksum: v.Checksum, URI: reg.URI(v).String(), LogicalDate: v.LogicalDate(),
		SupersededBy: sup.By.Version, SupersededDate: sup.By.LogicalDate(), Webhooks: []WebhookResult{},
	}
	out.Summary = out.summary()
	return out
}

// earlierMove finds the move an earlier attempt of this node made, if any:
// a retry must not move the alias a second time, least of all back from a
// version someone deployed in between. Only retries look, since reading
// the history costs a request per move.
func earlierMove(ctx context.Context, reg *models.Registry, name, alias, version string, by models.Actor) (models.Move, bool, error) {
	if !activity.IsActivity(ctx) || activity.GetInfo(ctx).Attempt <= 1 {
		return models.Move{}, false, nil
	}
	history, err := reg.History(ctx, name, alias)
	if errors.Is(err, models.ErrNotFound) {
		return models.Move{}, false, nil
	}
	if err != nil {
		return models.Move{}, false, err
	}
	for i := len(history) - 1; i >= 0; i-- {
		if m := history[i]; m.Actor == by && m.To == version && m.Kind == "promote" {
			return m, true, nil
		}
	}
	return models.Move{}, false, nil
}

func validateDeploy(w DeployWith) error {
	if w.Dir == "" && w.Version == "" {
		return errors.New("give dir (a candidate to register) or version (a registered version)")
	}
	// Check refuses a literal below 1; one from a reference is known now.
	if w.WebhookAttempts < 1 {
		return fmt.Errorf("webhook_attempts must be at least 1, got %d", w.WebhookAttempts)
	}
	if err := models.ValidateName("model", w.Model); err != nil {
		return err
	}
	if err := models.ValidateName("alias", w.Alias); err != nil {
		return err
	}
	if w.Version != "" {
		if err := models.ValidateName("version", w.Version); err != nil {
			return err
		}
	}
	for _, h := range w.Webhooks {
		if err := checkWebhook(h); err != nil {
			return err
		}
	}
	return nil
}

// metricValues reads the metrics a version records, by package number's
// rule (outputs of command nodes are strings). A version records finite
// figures only: JSON has no NaN, and a null metric here is a pipeline that
// passed on a figure it could not compute.
func metricValues(in map[string]any) (map[string]float64, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]float64, len(in))
	for _, k := range slices.Sorted(maps.Keys(in)) {
		f, err := number.Figure(in[k])
		if err != nil {
			return nil, fmt.Errorf("metrics: %s: %w", k, err)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("metrics: %s is %s: a model version records finite figures only", k, describeFigure(in[k], f))
		}
		out[k] = f
	}
	return out, nil
}

// describeFigure names a non-finite figure as given: null or its value.
func describeFigure(v any, f float64) string {
	if v == nil {
		return "null"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
