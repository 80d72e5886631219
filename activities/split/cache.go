package split

import (
	"context"
	"errors"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	lakenode "github.com/retrain-ml/retrain/activities/lake"
	"github.com/retrain-ml/retrain/nodetype"
)

// cacheVersion is the split type's version in the node cache: bump it
// when the same inputs make another split.
const cacheVersion = 1

// cache keys a split on the snapshots it reads: those its `with` names
// (already in the key), else the tables' current ones, joined staging
// tables included. A hit is served while its checkpoint is still in the
// object store (`retrain gc` or the store's expiration may have removed
// it). A split of files is not cached: its files have no content key.
func (s *Splits) cache() nodetype.Cache {
	l := &lakenode.Lake{Catalog: s.Catalog, Logger: s.Logger}
	return nodetype.Cache{
		Version: cacheVersion,
		Inputs: func(ctx context.Context, in nodetype.Input, _ []string) (nodetype.Identities, error) {
			w, err := nodetype.DecodeWith[With](in.With)
			if err != nil {
				return nil, err
			}
			if w.Files != nil {
				return nil, errors.New("a split of files is not cached: the files have no content key")
			}
			ids := nodetype.Identities{}
			var current []string
			if w.Table != "" && (w.SnapshotID == nil || w.SnapshotID == "") {
				current = append(current, w.Table)
			}
			for _, j := range w.Join {
				if j.Table != "" && (j.SnapshotID == nil || j.SnapshotID == "") {
					current = append(current, j.Table)
				}
			}
			if err := l.Snapshots(ctx, ids, current...); err != nil {
				return nil, err
			}
			return ids, nil
		},
		Verify: func(ctx context.Context, _ nodetype.Input, outputs map[string]any) (string, error) {
			if s.Store == nil {
				return "", objects.NoStore()
			}
			uri, _ := outputs["uri"].(string)
			if uri == "" {
				return "the cached outputs name no split", nil
			}
			return objects.Gone(ctx, s.Store, uri)
		},
	}
}
