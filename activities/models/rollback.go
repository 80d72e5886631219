package models

import (
	"context"
	"errors"
	"fmt"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/nodetype"
)

// RollbackModelWith is a rollback_model node's `with` block.
type RollbackModelWith struct {
	Model  string `json:"model" required:"true" doc:"model name"`
	Alias  string `json:"alias" default:"production" doc:"alias to move"` // models.DefaultAlias
	To     string `json:"to" doc:"version to move back to, e.g. ${nodes.deploy.outputs.previous_version}"`
	From   string `json:"from" doc:"version being undone, e.g. ${nodes.deploy.outputs.version}; the alias is left alone if it names another"`
	Reason string `json:"reason" doc:"why, recorded in the alias history (default: the node and pipeline that rolled back)"`
	Force  bool   `json:"force" literal:"true" doc:"move back even to a version trained for an older logical date than the one the alias names (undoing this run's own move needs no force); written literally (true), never from a ${...}; the move is recorded as forced"`
}

// RollbackModelOutputs are a rollback_model node's outputs.
type RollbackModelOutputs struct {
	Model   string `json:"model"`
	Alias   string `json:"alias"`
	From    string `json:"from"` // what the alias named before; to when nothing moved
	To      string `json:"to"`
	Changed bool   `json:"changed"`
	Forced  bool   `json:"forced"` // moved to an older date by force
	Seq     int64  `json:"seq"`
	// Webhooks are the model's webhooks (`retrain model webhooks`) told
	// of the move; a failed one does not undo it.
	Webhooks       []WebhookResult `json:"webhooks"`
	WebhooksFailed int             `json:"webhooks_failed"`
	Summary        string          `json:"summary"` // one line for the run's node table
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
			"with neither, it undoes the alias's latest move. Every move is recorded in the alias history, and told to the " +
			"model's webhooks (`retrain model webhooks`), whose deliveries the history records.",
		Check: checkRollbackModel,
	}, m.RollbackModel)
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
	if hasFrom && w.From == w.To {
		// The deploy being undone moved nothing (the alias already named
		// its version, or named one of a later date): there is nothing to
		// undo, whatever the alias names now.
		return RollbackModelOutputs{Model: w.Model, Alias: w.Alias, From: w.To, To: w.To,
			Summary: fmt.Sprintf("%s %s: nothing to undo (the deploy did not move it to %s)", w.Model, w.Alias, w.To)}, nil
	}
	reg, err := m.registry()
	if err != nil {
		return RollbackModelOutputs{}, err
	}
	reason := w.Reason
	if reason == "" {
		reason = fmt.Sprintf("rollback by node %s of pipeline %s", in.Node, in.Pipeline)
	}
	// With from, only while the alias still names it: a later move by
	// someone else is not undone. Without to, the latest move is undone.
	mv, err := reg.Move(ctx, models.MoveRequest{
		Model: w.Model, Alias: w.Alias, Kind: models.KindRollback, To: w.To, IfFrom: hasFrom && w.From != "", From: w.From,
		Force: w.Force, By: actor(in), Reason: reason,
	})
	if err != nil {
		return RollbackModelOutputs{}, modelsError(err)
	}
	m.Logger.Info("model rolled back", "pipeline", in.Pipeline, "run", in.RunID, "node", in.Node,
		"model", w.Model, "alias", w.Alias, "from", mv.From, "to", mv.To, "changed", mv.Changed, "seq", mv.Seq)
	from := mv.From
	if !mv.Changed {
		from = mv.To // nothing moved: the alias already named the target
	}
	out := RollbackModelOutputs{Model: w.Model, Alias: w.Alias, From: from, To: mv.To, Changed: mv.Changed, Forced: mv.Changed && mv.Forced, Seq: mv.Seq}
	out.Webhooks = m.NotifyMove(ctx, in, mv, nil)
	if out.Webhooks == nil {
		out.Webhooks = []WebhookResult{}
	}
	for _, r := range out.Webhooks {
		if !r.OK() {
			out.WebhooksFailed++
		}
	}
	out.Summary = fmt.Sprintf("%s %s: %s → %s (rolled back)", w.Model, w.Alias, cmpOr(from, "none"), mv.To)
	if out.Forced {
		out.Summary = fmt.Sprintf("%s %s: %s → %s (rolled back by force to an older date)", w.Model, w.Alias, from, mv.To)
	}
	if !mv.Changed {
		out.Summary = fmt.Sprintf("%s %s already at %s", w.Model, w.Alias, mv.To)
	}
	if out.WebhooksFailed > 0 {
		out.Summary += fmt.Sprintf("; %d of %d webhooks failed", out.WebhooksFailed, len(out.Webhooks))
	}
	return out, nil
}
