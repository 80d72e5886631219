// Package models is retrain's model registry, kept in object storage.
//
// A model has immutable versions and mutable aliases. Below a Store's
// prefix, model NAME is laid out as
//
//	models/NAME/versions/V/claim.json        who may write version V
//	models/NAME/versions/V/files/...         the artifact files
//	models/NAME/versions/V/model.json        metadata; written last
//	models/NAME/digests/SHA256.json          which version holds these artifacts
//	models/NAME/aliases/ALIAS.json           the version ALIAS points at
//	models/NAME/aliases/ALIAS/history/N.json the N-th move of ALIAS
//
// # Versions
//
// [Registry.Register] uploads the artifact files and then creates model.json
// with If-None-Match, so a version is complete exactly when model.json
// exists; incomplete versions are invisible. Before uploading, a
// registration claims the version with claim.json, also If-None-Match,
// recording the checksum of the artifacts: only registrations of the same
// artifacts may write into a version, so concurrent or retried
// registrations can never mix their files. Registering the same artifacts
// under the same version again returns the existing version; different
// artifacts fail with [ErrVersionExists].
//
// Versions registered without a name are numbered v1, v2, ... by claiming
// the next free number. The digests index makes such registrations
// idempotent too: a retry after a crash finds the version its artifacts
// already have instead of creating another one. A crash between claiming a
// number and recording it in the index leaves that number unused.
//
// # Aliases
//
// An alias such as "production" is moved by [Registry.Move], the one
// code path for every move (deploy, canary, compensations, the CLI's
// promote and rollback), which applies one rule: an alias never moves to
// a version trained for an older logical time than the one it names,
// unless the move is forced (the history then records it as forced) or a
// run undoes its own move. Every move is first recorded as history entry
// N+1, created with If-None-Match, where N is the sequence number of the
// move the alias currently reflects; then the alias object is replaced by
// compare-and-swap on its ETag. Claiming the sequence number serializes
// moves: of concurrent movers exactly one records entry N+1, the others
// retry after it. An entry whose mover crashed before the swap is applied
// by the next reader or mover of the alias, so the alias always ends up
// where the history says, every move appears in the history exactly once,
// and [Registry.AliasAt] can answer which version an alias named at any
// past time.
package models
