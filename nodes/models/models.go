package models

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retrain-ml/retrain/nodes/internal/objects"
	"github.com/retrain-ml/retrain/nodes/progenv"

	"go.temporal.io/sdk/activity"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/number"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

const (
	defaultWebhookBackoff = time.Second
	webhookTimeout        = 10 * time.Second
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

// DeployWith is a deploy node's `with` block.
type DeployWith struct {
	Model           string            `json:"model" required:"true" doc:"model name"`
	Dir             string            `json:"dir" doc:"folder of the candidate's artifact files, local or s3:// in the object store (a train node's model_uri), registered unless the same files are already a version"`
	Version         string            `json:"version" doc:"version name to register the files as (default: the next vN), or, without dir, the registered version to deploy"`
	Alias           string            `json:"alias" default:"production" doc:"alias to move"` // models.DefaultAlias
	Metrics         map[string]any    `json:"metrics" doc:"map of metric name to number, recorded with a new version"`
	DataSnapshots   []string          `json:"data_snapshots" doc:"ids of the training data (checkpoint or table snapshots), recorded with a new version"`
	Labels          map[string]string `json:"labels" doc:"labels recorded with a new version"`
	Reason          string            `json:"reason" doc:"why, recorded in the alias history (default: the node and pipeline that deployed)"`
	Webhooks        []string          `json:"webhooks" doc:"URLs to POST the new alias to (JSON) after the move; they may hold ${secret.NAME} (not in the host), resolved on the worker"`
	WebhookAttempts int               `json:"webhook_attempts" default:"3" doc:"attempts per webhook"`
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
	PreviousVersion string          `json:"previous_version"`
	Moved           bool            `json:"moved"`
	Seq             int64           `json:"seq"` // the alias history entry of the move
	Checksum        string          `json:"checksum"`
	URI             string          `json:"uri"` // where the artifact files are
	WebhooksOK      int             `json:"webhooks_ok"`
	WebhooksFailed  int             `json:"webhooks_failed"`
	Webhooks        []WebhookResult `json:"webhooks"`
	Summary         string          `json:"summary"` // one line for the run's node table
}

// summary says what the deploy did to the alias: "production: v1 → v2",
// "production: none → v1", "production already at v2".
func (o DeployOutputs) summary() string {
	s := fmt.Sprintf("%s %s: %s → %s", o.Model, o.Alias, cmpOr(o.PreviousVersion, "none"), o.Version)
	if !o.Moved {
		s = fmt.Sprintf("%s %s already at %s", o.Model, o.Alias, o.Version)
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
				return fmt.Errorf("webhook %q: a secret may not be in the host (the request, and a DNS lookup of it, would send it to whoever the name points at); put it in the path, query or user information", displayURL(s))
			}
		}
	}
	return nil
}

func (m *Models) deployType() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name: DeployName,
		Doc: "Register a model candidate (a folder of artifact files) in the registry unless it is already registered, " +
			"and move an alias (production) to it by compare-and-swap; then POST the new alias to webhooks. " +
			"A retry finishes an interrupted deploy and never registers a second version. " +
			"A failed webhook is retried and reported in the outputs; it does not undo the deploy.",
		Check: checkDeploy,
	}, m.Deploy)
}

// RollbackModelWith is a rollback_model node's `with` block.
type RollbackModelWith struct {
	Model  string `json:"model" required:"true" doc:"model name"`
	Alias  string `json:"alias" default:"production" doc:"alias to move"` // models.DefaultAlias
	To     string `json:"to" doc:"version to move back to, e.g. ${nodes.deploy.outputs.previous_version}"`
	From   string `json:"from" doc:"version being undone, e.g. ${nodes.deploy.outputs.version}; the alias is left alone if it names another"`
	Reason string `json:"reason" doc:"why, recorded in the alias history (default: the node and pipeline that rolled back)"`
}

// RollbackModelOutputs are a rollback_model node's outputs.
type RollbackModelOutputs struct {
	Model   string `json:"model"`
	Alias   string `json:"alias"`
	From    string `json:"from"` // what the alias named before; to when nothing moved
	To      string `json:"to"`
	Changed bool   `json:"changed"`
	Seq     int64  `json:"seq"`
	Summary string `json:"summary"` // one line for the run's node table
}

func checkRollbackModel(with map[string]any) error {
	_, from := with["from"]
	_, to := with["to"]
	if from && !to {
		return errors.New("from needs to: the version to move back to")
	}
	return CheckNames(with, "model", "alias")
}

func (m *Models) rollbackModelType() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name: RollbackModelName,
		Doc: "Move a model's alias back. With from and to (a deploy's version and previous_version, as an on_failure " +
			"compensation does), it undoes exactly that deploy, and only while the alias still names from; " +
			"with neither, it undoes the alias's latest move. Every move is recorded in the alias history.",
		Check: checkRollbackModel,
	}, m.RollbackModel)
}

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

	var v models.Version
	if w.Dir != "" && !strings.HasPrefix(w.Dir, "s3://") {
		// A starter must not copy what it likes off the worker into the store.
		if err := m.Env.CheckPath("dir", w.Dir); err != nil {
			return DeployOutputs{}, err
		}
	}
	if w.Dir != "" {
		dir, cleanup, err := objects.LocalDir(ctx, m.Store, w.Dir)
		if err != nil {
			return DeployOutputs{}, err
		}
		defer cleanup()
		artifacts, err := models.DirArtifacts(dir)
		if err != nil {
			return DeployOutputs{}, nodetype.Permanent(errtype.BadInput, "dir: %v", err)
		}
		if len(artifacts) == 0 {
			return DeployOutputs{}, nodetype.Permanent(errtype.BadInput, "dir %s holds no files", w.Dir)
		}
		v, err = reg.Register(ctx, w.Model, artifacts, w.Version, models.Meta{
			Metrics: metrics, DataSnapshots: w.DataSnapshots, PipelineRun: in.RunID, Labels: w.Labels,
		})
		if err != nil {
			return DeployOutputs{}, modelsError(err)
		}
		log.Info("candidate registered", "version", v.Version, "checksum", v.Checksum)
	} else {
		if v, err = reg.Get(ctx, w.Model, w.Version); err != nil {
			return DeployOutputs{}, modelsError(err)
		}
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
		if move, err = reg.Promote(ctx, w.Model, w.Alias, v.Version, by, reason); err != nil {
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
		Moved: moved, Seq: move.Seq, Checksum: v.Checksum, URI: reg.URI(v).String(),
	}
	out.Webhooks = m.notify(ctx, w, webhookEvent{
		Model: w.Model, Alias: w.Alias, Version: v.Version, PreviousVersion: previous, Checksum: v.Checksum,
		URI: out.URI, Seq: move.Seq, Pipeline: in.Pipeline, Run: in.RunID, Time: move.Time,
	}, log)
	for _, r := range out.Webhooks {
		if r.Error == "" {
			out.WebhooksOK++
		}
	}
	out.WebhooksFailed = len(out.Webhooks) - out.WebhooksOK
	out.Summary = out.summary()
	return out, nil
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
	}
	return err
}

// RollbackModel runs a rollback_model node.
func (m *Models) RollbackModel(ctx context.Context, in nodetype.Input, w RollbackModelWith) (RollbackModelOutputs, error) {
	// Whether from and to are given is read from the block itself: a key
	// whose value is null or "" still counts as given.
	_, hasFrom := in.With["from"]
	_, hasTo := in.With["to"]
	if hasTo && w.To == "" {
		// The usual cause: the deploy being undone was the alias's first.
		return RollbackModelOutputs{}, nodetype.Permanent(errtype.BadInput, "to is empty: %s of %s named no version before %s, so it cannot be moved back and still names it", w.Alias, w.Model, cmpOr(w.From, "this deploy"))
	}
	if hasFrom && !hasTo {
		return RollbackModelOutputs{}, nodetype.Permanent(errtype.BadInput, "from needs to: the version to move back to")
	}
	reg, err := m.registry()
	if err != nil {
		return RollbackModelOutputs{}, err
	}
	reason := w.Reason
	if reason == "" {
		reason = fmt.Sprintf("rollback by node %s of pipeline %s", in.Node, in.Pipeline)
	}
	var mv models.Move
	if hasTo {
		mv, err = reg.Revert(ctx, w.Model, w.Alias, w.From, w.To, actor(in), reason)
	} else {
		mv, err = reg.Rollback(ctx, w.Model, w.Alias, actor(in), reason)
	}
	if err != nil {
		return RollbackModelOutputs{}, modelsError(err)
	}
	m.Logger.Info("model rolled back", "pipeline", in.Pipeline, "run", in.RunID, "node", in.Node,
		"model", w.Model, "alias", w.Alias, "from", mv.From, "to", mv.To, "changed", mv.Changed, "seq", mv.Seq)
	from := mv.From
	if !mv.Changed {
		from = mv.To // nothing moved: the alias already named the target
	}
	out := RollbackModelOutputs{Model: w.Model, Alias: w.Alias, From: from, To: mv.To, Changed: mv.Changed, Seq: mv.Seq}
	out.Summary = fmt.Sprintf("%s %s: %s → %s (rolled back)", w.Model, w.Alias, cmpOr(from, "none"), mv.To)
	if !mv.Changed {
		out.Summary = fmt.Sprintf("%s %s already at %s", w.Model, w.Alias, mv.To)
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// webhookEvent is the JSON body POSTed to a deploy's webhooks.
type webhookEvent struct {
	Model           string    `json:"model"`
	Alias           string    `json:"alias"`
	Version         string    `json:"version"`
	PreviousVersion string    `json:"previous_version"`
	Checksum        string    `json:"checksum"`
	URI             string    `json:"uri"` // where the artifact files are
	Seq             int64     `json:"seq"` // the alias history entry of the move
	Pipeline        string    `json:"pipeline"`
	Run             string    `json:"run_id"`
	Time            time.Time `json:"time"`
}

// WebhookResult is what a deploy reports about one webhook.
type WebhookResult struct {
	URL      string `json:"url"` // without credentials or query
	Status   int    `json:"status,omitempty"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

// notify POSTs ev to every webhook at once and reports each outcome. A
// serving system reloads on the call; at-least-once delivery is fine, since
// the event names the version and a reload of the same version is a no-op.
func (m *Models) notify(ctx context.Context, w DeployWith, ev webhookEvent, log *slog.Logger) []WebhookResult {
	body, _ := json.Marshal(ev)
	results := make([]WebhookResult, len(w.Webhooks))
	var wg sync.WaitGroup
	for i, hook := range w.Webhooks {
		wg.Go(func() {
			results[i] = m.post(ctx, dags.PointerTo("webhooks", strconv.Itoa(i)), hook, body, w.WebhookAttempts)
			if r := results[i]; r.Error != "" {
				log.Warn("webhook failed; the deploy stands", "url", r.URL, "attempts", r.Attempts, "error", r.Error)
			} else {
				log.Info("webhook notified", "url", r.URL, "status", r.Status, "attempts", r.Attempts)
			}
		})
	}
	wg.Wait()
	return results
}

// post sends body to hook, retrying transport errors, 5xx and 429 with
// exponential backoff.
func (m *Models) post(ctx context.Context, path, hook string, body []byte, attempts int) (res WebhookResult) {
	// The result shows the URL as written, ${secret.NAME} and all; only
	// the request gets the values, and errors have them masked.
	res = WebhookResult{URL: displayURL(hook)}
	if err := secretInHost(ctx, path, hook); err != nil {
		res.Error = err.Error()
		return res
	}
	hook, secrets, err := m.Env.ResolveString(ctx, path, hook)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer func() { res.Error = progenv.MaskString(res.Error, secrets) }()
	client := m.HTTP
	if client == nil {
		client = &http.Client{Timeout: webhookTimeout}
	}
	wait := m.webhookBackoff
	if wait == 0 {
		wait = defaultWebhookBackoff
	}
	for res.Attempts < attempts {
		res.Attempts++
		status, err := postOnce(ctx, client, hook, body)
		res.Status = status
		switch {
		case err == nil && status/100 == 2:
			res.Error = ""
			return res
		case err != nil:
			res.Error = err.Error()
		default:
			res.Error = fmt.Sprintf("HTTP %d", status)
			if status/100 == 4 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout {
				return res // the request itself is wrong: another try gets the same answer
			}
		}
		if res.Attempts == attempts {
			break
		}
		select {
		case <-ctx.Done():
			res.Error += "; " + ctx.Err().Error()
			return res
		case <-time.After(wait):
		}
		wait *= 2
	}
	return res
}

func postOnce(ctx context.Context, client *http.Client, hook string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "retrain-deploy")
	resp, err := client.Do(req)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err // its message holds the URL, query and all
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	return resp.StatusCode, nil
}

func checkWebhook(s string) error {
	u, err := url.Parse(progenv.Placeholders(s)) // a secret's value is known only on the worker
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook %q is not an http(s) URL", displayURL(s))
	}
	return nil
}

// hostRange returns the offsets of the host (and port) of the URL s: the
// authority after "scheme://", less any user information.
func hostRange(s string) (from, to int) {
	i := strings.Index(s, "://")
	if i < 0 {
		return 0, 0
	}
	from = i + 3
	to = len(s)
	if j := strings.IndexAny(s[from:], "/?#"); j >= 0 {
		to = from + j
	}
	if at := strings.LastIndexByte(s[from:to], '@'); at >= 0 {
		from += at + 1
	}
	return from, to
}

// secretInHost refuses spans of secret references that lie in the host
// of hook: checked at validation for the spec's text, and here again for
// what the run resolved, whose host a param may have supplied.
func secretInHost(ctx context.Context, path, hook string) error {
	from, to := hostRange(hook)
	for _, sp := range nodetype.SecretSpans(ctx, path) {
		if sp.Start < to && sp.Start+len(dags.SecretText(sp.Name)) > from {
			return nodetype.Permanent(errtype.BadInput, "webhook %s: secret %s is in the host; refused without sending anything", displayURL(hook), sp.Name)
		}
	}
	return nil
}

// displayURL drops what may be a secret from a webhook URL (user
// information, the query) before it is logged or recorded in outputs.
func displayURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "..."
	}
	u.Fragment = ""
	return u.String()
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
