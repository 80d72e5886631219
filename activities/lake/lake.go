// Package lake holds the node types that read and write the Iceberg lake:
// stage_features, feature_stats, promote_features (a child workflow and
// its activities), rollback_table and maintain_table.
package lake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// Lake runs the steps that read and write the Iceberg lake.
type Lake struct {
	Catalog *lake.Lazy
	Logger  *slog.Logger
	// Store holds the model registry, which maintain_table reads for the
	// snapshots model versions trained on; nil on a worker without one.
	Store *s3store.Store
	// SecretsDir is the worker's --secrets-dir, where the table queue's
	// key may be (queuekey.go).
	SecretsDir string

	keysOnce sync.Once
	keys     *queueKeys
	keyNote  sync.Once
}

// queueKeys is the worker's table queue key, resolved on first use.
func (l *Lake) queueKeys() *queueKeys {
	l.keysOnce.Do(func() { l.keys = &queueKeys{SecretsDir: l.SecretsDir, Store: l.Store} })
	return l.keys
}

// noteKeySource logs once where the table queue key came from (never the
// key), and warns when it is this process's own.
func (l *Lake) noteKeySource(source string) {
	l.keyNote.Do(func() {
		if l.Logger == nil {
			return
		}
		if strings.HasPrefix(source, "this worker process") {
			l.Logger.Warn("table queue key from "+source+"; set "+QueueKeyEnv+" or put "+QueueKeyFile+" in --secrets-dir on every worker", "component", "table-queue")
			return
		}
		l.Logger.Info("table queue key from "+source, "component", "table-queue")
	})
}

// Open opens the catalog; not configured is bad input, which no retry fixes.
func (l *Lake) Open(ctx context.Context) (*lake.Catalog, error) {
	cat, err := l.Catalog.Catalog(ctx)
	if err != nil {
		// Not configured is a setup error no retry will fix.
		if !l.configured() {
			return nil, nodetype.Permanent(errtype.BadInput, "%v", err)
		}
		return nil, err
	}
	return cat, nil
}

func (l *Lake) configured() bool { return l.Catalog.Configured() }

func (l *Lake) log(in nodetype.Input) *slog.Logger {
	return l.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node)
}

// Error maps the features package's error kinds to Temporal errors.
func Error(err error) error {
	switch {
	case err == nil:
		return nil
	case features.IsBadInput(err), errors.Is(err, lake.ErrNoSuchSnapshot), errors.Is(err, lake.ErrNoSuchTable):
		return nodetype.Permanent(errtype.BadInput, "%v", err)
	case features.IsCheckFailed(err):
		return nodetype.Permanent(errtype.CheckFailed, "%v", err)
	}
	return err
}

// CheckDates validates literal start_date/end_date values.
func CheckDates(with map[string]any) error {
	start, sok := with["start_date"].(string)
	end, eok := with["end_date"].(string)
	if sok && !dags.HasRef(start) {
		if _, err := backfill.ParseDay(start); err != nil {
			return fmt.Errorf("start_date: %w", err)
		}
	}
	if eok && !dags.HasRef(end) {
		if _, err := backfill.ParseDay(end); err != nil {
			return fmt.Errorf("end_date: %w", err)
		}
	}
	if sok && eok && !dags.HasRef(start) && !dags.HasRef(end) {
		if _, err := backfill.ParseDateRange(start, end); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotID reads a snapshot id given as a string or an exact integer.
func SnapshotID(v any) (int64, error) {
	switch x := v.(type) {
	case string:
		id, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a snapshot id", x)
		}
		return id, nil
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
			return 0, fmt.Errorf("%v cannot be an exact snapshot id as a number; pass it as a string", x)
		}
		return int64(x), nil
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	default:
		return 0, fmt.Errorf("want a snapshot id, got %T", v)
	}
}

// checkSnapshotID validates a literal snapshot id in with[key].
func checkSnapshotID(with map[string]any, key string) error {
	if v, ok := with[key]; ok && !dags.HasRef(v) {
		if _, err := SnapshotID(v); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	return nil
}

// The node types, for their names and schemas; Types returns them with
// their run functions.
var (
	StageFeaturesType   = (&Lake{}).stageType().NodeType
	FeatureStatsType    = (&Lake{}).statsType().NodeType
	PromoteFeaturesType = (&Lake{}).promoteType().NodeType
	RollbackTableType   = (&Lake{}).rollbackType().NodeType
	MaintainTableType   = (&Lake{}).maintainType().NodeType
)

// Deps are what the lake's node types need from the worker.
type Deps struct {
	// Catalog is the Iceberg catalog, opened on first use; nil on a worker
	// without one (the nodes then fail as bad input).
	Catalog *lake.Lazy
	Logger  *slog.Logger
	// Store is the model registry's store (see Lake.Store); may be nil.
	Store *s3store.Store
	// SecretsDir is the worker's --secrets-dir (see Lake.SecretsDir).
	SecretsDir string
}

// Types returns the node types that read and write the lake:
// stage_features, feature_stats, promote_features (a child workflow and
// its activities), rollback_table and maintain_table.
func Types(d Deps) []nodetype.Type {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	l := &Lake{Catalog: d.Catalog, Logger: d.Logger, Store: d.Store, SecretsDir: d.SecretsDir}
	return []nodetype.Type{l.stageType().WithCache(l.stageCache()), l.statsType().WithCache(l.statsCache()), l.promoteType(), l.rollbackType(), l.maintainType()}
}
