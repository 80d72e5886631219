package nodetype

import (
	"context"
	"strconv"
	"time"

	"github.com/retrain-ml/retrain/internal/nodecache"
)

// Cache is how a node type takes part in the node cache: the type's own
// version and how it derives the content identity of what a node reads by
// reference. A type with a Cache may be marked `cache:` in a spec (see
// WithCache); one without never is. A type whose node has effects on the
// world (deploys, moves traffic, writes a table's main, calls a webhook)
// must not have one.
type Cache struct {
	// Version is the type's semantic version: bump it when the same
	// inputs make other outputs, so every cached result of the type is
	// recomputed.
	Version int
	// Inputs returns the identities of what the node reads that its
	// `with` names only by reference: a table's snapshot id at the time
	// the node starts, a split's manifest checksum, a script's content
	// hash (Identities' methods). files are the spec's `cache: {files:
	// [globs]}`. Nil: the resolved `with` is all the node depends on.
	Inputs func(ctx context.Context, in Input, files []string) (Identities, error)
	// Verify says why a cached result can no longer be served ("snapshot
	// 12 of ml.training expired"), or "" when what its outputs point to is
	// all still there. Nil: nothing to check.
	Verify func(ctx context.Context, in Input, outputs map[string]any) (string, error)
}

// WithCache returns t marked as cacheable, with c as its cache hook.
func (t Type) WithCache(c Cache) Type {
	t.Cache = &c
	t.NodeType.Cacheable = true
	return t
}

// OptInCache returns t cached only where a node asks for it itself: a
// spec's `defaults: {cache: true}` leaves its nodes alone. For a type
// whose nodes may or may not have effects (a command).
func (t Type) OptInCache() Type {
	t.NodeType.CacheOptIn = true
	return t
}

// Identities are the content identities of a node's inputs, by input.
type Identities map[string]string

// Table records that the node reads an Iceberg table at a snapshot.
func (ids Identities) Table(name string, snapshot int64) {
	ids[nodecache.InputName(nodecache.KindTable, name)] = strconv.FormatInt(snapshot, 10)
}

// Object records that the node reads an object-store object (or folder:
// a split, a checkpoint) whose content is identified by id: its ETag,
// version or manifest checksum.
func (ids Identities) Object(uri, id string) {
	ids[nodecache.InputName(nodecache.KindObject, uri)] = id
}

// Model records that the node reads a registry model version whose
// content is identified by checksum.
func (ids Identities) Model(ref, checksum string) {
	ids[nodecache.InputName(nodecache.KindModel, ref)] = checksum
}

// Files adds the content hashes of the code a program node runs: each
// argument of argv that is an existing file (relative ones read from
// dir) and every file the globs match.
func (ids Identities) Files(dir string, argv, globs []string) error {
	got, err := nodecache.FileInputs(dir, argv, globs)
	if err != nil {
		return err
	}
	for k, v := range got {
		ids[k] = v
	}
	return nil
}

// The node cache's activities, which the pipeline workflow schedules
// around a node marked `cache:` on the node's own task queue (the worker
// that would run the node reads what it would read).
const (
	CacheLookupActivity = "NodeCacheLookup"
	CacheStoreActivity  = "NodeCacheStore"
)

// CacheLookup asks for a node's cached result.
type CacheLookup struct {
	Input   Input    `json:"input"`   // the node's input, as it would be sent
	Version int      `json:"version"` // the spec's cache version
	Files   []string `json:"files,omitempty"`
	// Labels name `with` paths for the miss reasons (nodecache.Labels).
	Labels map[string]string `json:"labels,omitempty"`
	// Skip, when set, asks for the key only: the node is recomputed
	// (--no-cache, --refresh) and Skip is why.
	Skip string `json:"skip,omitempty"`
}

// CacheLookupResult is what a lookup found: a hit's result, or a miss's
// reason. Components are the key's parts, which the store activity gets
// back after the node succeeds; none when the key could not be derived
// (the node then runs and is not stored).
type CacheLookupResult struct {
	Hit        bool                  `json:"hit"`
	Key        string                `json:"key,omitempty"`
	Reason     string                `json:"reason,omitempty"`
	Components *nodecache.Components `json:"components,omitempty"`
	// A hit's: the run, attempt and time that computed the result, and
	// its outputs.
	Run     string         `json:"run,omitempty"`
	Attempt int32          `json:"attempt,omitempty"`
	Time    time.Time      `json:"time,omitempty"`
	Outputs map[string]any `json:"outputs,omitempty"`
}

// CacheStore stores a succeeded node's result under its key.
type CacheStore struct {
	Pipeline   string               `json:"pipeline"`
	Run        string               `json:"run"`
	Node       string               `json:"node"`
	Components nodecache.Components `json:"components"`
	Result     Result               `json:"result"`
}
