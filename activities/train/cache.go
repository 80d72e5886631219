package train

import (
	"context"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/nodetype"
)

// cacheVersion is the train type's version in the node cache: bump it
// when the same inputs train another model (the builtin trainer's
// algorithm changed).
const cacheVersion = 1

// cache keys a train node on its split's manifest (its content: each
// file's checksum is in it) and, for a command trainer, the content of
// each file its argv names and of the files the spec's cache.files
// globs match, read from its dir. Its env is in the `with`, as written:
// a ${secret.NAME} there is the reference, never the value. A hit is
// served while the model's folder is still in the object store.
func (t *Trainers) cache() nodetype.Cache {
	return nodetype.Cache{
		Version: cacheVersion,
		Inputs: func(ctx context.Context, in nodetype.Input, files []string) (nodetype.Identities, error) {
			w, err := nodetype.DecodeWith[With](in.With)
			if err != nil {
				return nil, err
			}
			if t.Store == nil {
				return nil, objects.NoStore()
			}
			ids := nodetype.Identities{}
			id, err := objects.Identity(ctx, t.Store, w.Data)
			if err != nil {
				return nil, err
			}
			ids.Object(w.Data, id)
			if w.Trainer == CommandTrainer {
				if err := ids.Files(w.Dir, w.Argv, files); err != nil {
					return nil, err
				}
			}
			return ids, nil
		},
		Verify: func(ctx context.Context, _ nodetype.Input, outputs map[string]any) (string, error) {
			if t.Store == nil {
				return "", objects.NoStore()
			}
			uri, _ := outputs["model_uri"].(string)
			if uri == "" {
				return "the cached outputs name no model", nil
			}
			return objects.Gone(ctx, t.Store, uri)
		},
	}
}
