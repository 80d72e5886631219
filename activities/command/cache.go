package command

import (
	"context"

	"github.com/retrain-ml/retrain/nodetype"
)

// cacheVersion is the command type's version in the node cache.
const cacheVersion = 1

// cache keys a command node on the content of each file its argv names
// (the team's scripts) and of the files the spec's cache.files globs
// match (what those import), read from its dir. Its env is in the
// `with`, as written: a ${secret.NAME} there is the reference, never the
// value. A command may have effects no type can know, so only a node's
// own `cache:` caches it, never the spec's defaults.
func cache() nodetype.Cache {
	return nodetype.Cache{
		Version: cacheVersion,
		Inputs: func(_ context.Context, in nodetype.Input, files []string) (nodetype.Identities, error) {
			w, err := nodetype.DecodeWith[With](in.With)
			if err != nil {
				return nil, err
			}
			ids := nodetype.Identities{}
			if err := ids.Files(w.Dir, w.Argv, files); err != nil {
				return nil, err
			}
			return ids, nil
		},
	}
}
