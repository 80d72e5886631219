package lake

import (
	"context"
	"fmt"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// RollbackWith is a rollback_table node's `with` block.
type RollbackWith struct {
	Table string `json:"table" required:"true" doc:"namespace.table"`
	// To is a string or an exact integer (see SnapshotID).
	To any `json:"to" type:"any" required:"true" doc:"snapshot id (a string: ids are 64-bit), e.g. ${nodes.promote.outputs.previous_snapshot_id}"`
}

// RollbackOutputs are a rollback_table node's outputs.
type RollbackOutputs struct {
	Table          string `json:"table"`
	FromSnapshotID int64  `json:"from_snapshot_id,string"` // main's head before; a string: ids are 64-bit
	ToSnapshotID   int64  `json:"to_snapshot_id,string"`
	Ancestor       bool   `json:"ancestor"`        // to was an ancestor of main's head
	SchemaRestored bool   `json:"schema_restored"` // to's schema was made current again
	NoOp           bool   `json:"noop"`            // main was already at to
	Summary        string `json:"summary"`         // one line for the run's node table
}

func (o RollbackOutputs) summary() string {
	if o.NoOp {
		return fmt.Sprintf("%s: main already at snapshot %d", o.Table, o.ToSnapshotID)
	}
	s := fmt.Sprintf("%s: main %d → %d", o.Table, o.FromSnapshotID, o.ToSnapshotID)
	if o.SchemaRestored {
		s += ", schema restored"
	}
	return s
}

func (l *Lake) rollbackType() nodetype.Type {
	return nodetype.New(dags.NodeType{
		Name: "rollback_table",
		Doc:  "Move a table's main branch to a snapshot (and its schema back), rewriting metadata only; the compensation of promote_features.",
		Check: func(with map[string]any) error {
			return checkSnapshotID(with, "to")
		},
	}, l.Rollback)
}

// Rollback runs a rollback_table node.
func (l *Lake) Rollback(ctx context.Context, in nodetype.Input, w RollbackWith) (RollbackOutputs, error) {
	if _, err := lake.Ident(w.Table); err != nil {
		return RollbackOutputs{}, nodetype.Permanent(errtype.BadInput, "table: %v", err)
	}
	to, err := SnapshotID(w.To)
	if err != nil {
		return RollbackOutputs{}, nodetype.Permanent(errtype.BadInput, "to: %v", err)
	}
	cat, err := l.Open(ctx)
	if err != nil {
		return RollbackOutputs{}, err
	}
	res, err := cat.Rollback(ctx, w.Table, to)
	if err != nil {
		return RollbackOutputs{}, Error(err)
	}
	l.log(in).Info("rolled back", "table", w.Table, "from", res.From, "to", res.To, "schema_restored", res.Schema)
	out := RollbackOutputs{
		Table: res.Table, FromSnapshotID: res.From, ToSnapshotID: res.To,
		Ancestor: res.Ancestor, SchemaRestored: res.Schema, NoOp: res.NoOp,
	}
	out.Summary = out.summary()
	return out, nil
}
