package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	canarynode "github.com/retrain-ml/retrain/activities/canary"
	modelnodes "github.com/retrain-ml/retrain/activities/models"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/models"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
	"github.com/retrain-ml/retrain/runs"
)

// reuseVerifier is the VerifyReuseActivity: it checks, for each node a
// run would take over from an earlier one, that what its outputs point
// to still exists. A type's own Verify decides for its nodes; the others
// get the generic check (outputsGone).
type reuseVerifier struct {
	types  map[string]nodetype.Type
	store  *s3store.Store // nil on a worker without one
	lake   *lake.Lazy     // nil on a worker without a catalog
	logger *slog.Logger
}

// perNodeTimeout bounds the checks of one node, so one slow table does
// not take the whole activity's time.
const perNodeTimeout = 30 * time.Second

// Verify runs the checks. A check that cannot be made (a store error)
// counts as gone, with the error as the reason: a rerun then runs the
// node, which is never wrong, where reusing unchecked outputs might be.
func (v *reuseVerifier) Verify(ctx context.Context, checks []runs.ReuseCheck) (runs.ReuseVerdict, error) {
	out := runs.ReuseVerdict{Gone: map[string]string{}}
	for _, c := range checks {
		nctx, cancel := context.WithTimeout(ctx, perNodeTimeout)
		var err error
		if t, ok := v.types[c.Type]; ok && t.Verify != nil {
			err = t.Verify(nctx, c.With, c.Outputs)
		} else {
			err = v.outputsGone(nctx, c)
		}
		cancel()
		if ctx.Err() != nil {
			return runs.ReuseVerdict{}, ctx.Err()
		}
		if err != nil {
			out.Gone[c.Node] = err.Error()
			v.logger.Info("rerun: outputs not reused", "node", c.Node, "type", c.Type, "reason", err.Error())
		}
	}
	return out, nil
}

// outputsGone is the generic check of a node's outputs: every s3:// URI
// among its top-level outputs (but a train node's checkpoint) names an
// object, or a folder holding one;
// a snapshot_id output is a snapshot of its table that table
// maintenance has not expired: the `with`'s table or training_table, or
// a table the node outputs by name (staging_table, table), which must
// still be at that snapshot; a deploy's or canary's version
// is still in the registry.
func (v *reuseVerifier) outputsGone(ctx context.Context, c runs.ReuseCheck) error {
	keys := make([]string, 0, len(c.Outputs))
	for k := range c.Outputs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s, ok := c.Outputs[k].(string)
		// A train node's last checkpoint is where a retry resumes, not
		// its result (model_uri): `retrain gc` may take it.
		if !ok || !strings.HasPrefix(s, "s3://") || k == "checkpoint" {
			continue
		}
		if err := v.objectExists(ctx, s); err != nil {
			return fmt.Errorf("output %s: %w", k, err)
		}
	}
	if snap, ok := c.Outputs["snapshot_id"]; ok {
		// A table the node outputs by name (a staging table) is read by
		// name downstream (promote_features reads its current state), so
		// the node's snapshot must still be the table's current one; a
		// table of its `with` is read by the snapshot id.
		table, current := firstString(c.Outputs["staging_table"], c.Outputs["table"]), true
		if table == "" {
			table, current = firstString(c.With["table"], c.With["training_table"]), false
		}
		if err := v.snapshotExists(ctx, table, snap, current); err != nil {
			return err
		}
	}
	if c.Type == modelnodes.DeployName || c.Type == canarynode.Name {
		name, _ := c.Outputs["model"].(string)
		version, _ := c.Outputs["version"].(string)
		if name != "" && version != "" {
			if v.store == nil {
				return errors.New("this worker has no object store to find model versions in")
			}
			if _, err := models.New(v.store).Get(ctx, name, version); err != nil {
				return fmt.Errorf("model version %s@%s: %w", name, version, err)
			}
		}
	}
	return nil
}

// objectExists checks that uri names an object of the store, or a
// folder with at least one.
func (v *reuseVerifier) objectExists(ctx context.Context, uri string) error {
	if v.store == nil {
		return fmt.Errorf("%s: this worker has no object store to look in", uri)
	}
	u, err := s3store.ParseURI(uri)
	if err != nil {
		return err
	}
	root := v.store.URI()
	prefix := strings.TrimSuffix(root.Key, "/")
	if prefix != "" {
		prefix += "/"
	}
	if u.Bucket != root.Bucket || !strings.HasPrefix(u.Key, prefix) {
		return fmt.Errorf("%s is outside this worker's object store %s", uri, root)
	}
	key := strings.TrimPrefix(u.Key, prefix)
	if key != "" && !strings.HasSuffix(key, "/") {
		_, err := v.store.Head(ctx, key)
		if err == nil {
			return nil
		}
		if !errors.Is(err, s3store.ErrNotFound) {
			return fmt.Errorf("%s: %w", uri, err)
		}
	}
	for _, err := range v.store.List(ctx, strings.TrimSuffix(key, "/")+"/") {
		if err != nil {
			return fmt.Errorf("%s: %w", uri, err)
		}
		return nil // one object is enough
	}
	return fmt.Errorf("%s is gone", uri)
}

// snapshotExists checks that snap (an id, as a string or a number) is a
// snapshot of table, and with current that it is the table's current one.
func (v *reuseVerifier) snapshotExists(ctx context.Context, table string, snap any, current bool) error {
	var id int64
	var err error
	switch s := snap.(type) {
	case string:
		id, err = strconv.ParseInt(s, 10, 64)
	case float64:
		id = int64(s)
	case int64:
		id = s
	default:
		err = fmt.Errorf("%T", snap)
	}
	if err != nil {
		return fmt.Errorf("snapshot_id %v is not a snapshot id", snap)
	}
	if id == 0 {
		return nil // the node wrote nothing (an empty table's "no snapshot")
	}
	if table == "" {
		return fmt.Errorf("snapshot %d: the node names no table to find it in", id)
	}
	if v.lake == nil || !v.lake.Configured() {
		return fmt.Errorf("snapshot %d of %s: this worker has no catalog to look in", id, table)
	}
	cat, err := v.lake.Catalog(ctx)
	if err != nil {
		return fmt.Errorf("snapshot %d of %s: %w", id, table, err)
	}
	tbl, err := cat.Load(ctx, table)
	if err != nil {
		return fmt.Errorf("snapshot %d of %s: %w", id, table, err)
	}
	if tbl.Metadata().SnapshotByID(id) == nil {
		return fmt.Errorf("snapshot %d of %s is gone (expired by table maintenance?)", id, table)
	}
	if cur := tbl.Metadata().CurrentSnapshot(); current && (cur == nil || cur.SnapshotID != id) {
		now := "none"
		if cur != nil {
			now = strconv.FormatInt(cur.SnapshotID, 10)
		}
		return fmt.Errorf("%s has changed since: its current snapshot is %s, not %d, and downstream nodes read it by name", table, now, id)
	}
	return nil
}

func firstString(vs ...any) string {
	for _, v := range vs {
		if s, ok := v.(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// rerunLoader is the LoadReuseActivity: it reads the run a rerun reruns
// from Temporal, so that the results a rerun takes over are that run's
// own. A run that cannot be rerun fails it as InvalidPipeline, not retried.
type rerunLoader struct{ c client.Client }

func (l rerunLoader) Load(ctx context.Context, run string) (*runs.Reuse, error) {
	out, err := runs.LoadReuse(ctx, l.c, run)
	if runs.IsRefusal(err) {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), errtype.InvalidPipeline, nil)
	}
	return out, err
}
