package nodecache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Entry is one cached node result, stored as JSON under EntryPath(key).
type Entry struct {
	Format     int            `json:"format"` // EntryFormat
	Key        string         `json:"key"`
	Components Components     `json:"components"`
	Outputs    map[string]any `json:"outputs"`
	// Where it came from: the run, node and attempt that produced it, the
	// worker that stored it and when.
	Run       string    `json:"run"`
	Node      string    `json:"node"`
	Attempt   int32     `json:"attempt"`
	Worker    string    `json:"worker"`
	Time      time.Time `json:"time"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
}

// EntryFormat is the version of the entry's JSON form.
const EntryFormat = 1

// Prefix is the folder of the object store the cache lives under.
const Prefix = "cache/"

// EntryPath is where the entry of key lives.
func EntryPath(key string) string { return Prefix + "entries/" + key + ".json" }

// LastPath is where the components of a pipeline node's latest key live:
// what the next lookup of that node diffs against to explain a miss.
// The pipeline name is hashed: it is free text.
func LastPath(pipeline, node string) string {
	sum := sha256.Sum256([]byte(pipeline))
	return Prefix + "last/" + hex.EncodeToString(sum[:12]) + "/" + node + ".json"
}

// ErrNotFound is what a Store returns for an object that is not there.
var ErrNotFound = errors.New("nodecache: not found")

// Store is the object store entries live in.
type Store interface {
	Get(ctx context.Context, path string) ([]byte, error) // ErrNotFound (wrapped) when absent
	Put(ctx context.Context, path string, data []byte) error
}

// Verify checks that what a cached result's outputs point to still exists;
// a non-empty reason makes the lookup a miss ("snapshot 12 of ml.training
// expired"). An error is a miss too, with the error as its reason.
type Verify func(ctx context.Context, outputs map[string]any) (reason string, err error)

// Result is what a lookup found.
type Result struct {
	Hit    bool   `json:"hit"`
	Key    string `json:"key"`
	Reason string `json:"reason,omitempty"` // a miss's
	Entry  *Entry `json:"entry,omitempty"`  // a hit's
}

// ReasonNoEntry is the miss of a node never stored before.
const ReasonNoEntry = "no entry"

// Lookup finds cur's entry in st and checks it. It never fails: a store
// that cannot be read, an entry that does not parse or whose outputs are
// gone, is a miss with that reason. On a miss, the reason is the diff
// against the components last stored for the pipeline's node.
func Lookup(ctx context.Context, st Store, pipeline, node string, cur Components, verify Verify) Result {
	key := cur.Key()
	res := Result{Key: key}
	data, err := st.Get(ctx, EntryPath(key))
	switch {
	case errors.Is(err, ErrNotFound):
		res.Reason = explainMiss(ctx, st, pipeline, node, cur)
		return res
	case err != nil:
		res.Reason = fmt.Sprintf("cache unreadable: %v", err)
		return res
	}
	e, err := ParseEntry(data)
	if err != nil {
		res.Reason = fmt.Sprintf("entry %s unreadable: %v", key[:12], err)
		return res
	}
	if e.Key != key {
		res.Reason = fmt.Sprintf("entry %s holds key %.12s", key[:12], e.Key)
		return res
	}
	if verify != nil {
		why, err := verify(ctx, e.Outputs)
		if err != nil {
			why = fmt.Sprintf("cannot check outputs: %v", err)
		}
		if why != "" {
			res.Reason = fmt.Sprintf("cached result of run %s is gone: %s", e.Run, why)
			return res
		}
	}
	res.Hit, res.Entry = true, e
	return res
}

// explainMiss diffs cur against the components last stored for the node.
func explainMiss(ctx context.Context, st Store, pipeline, node string, cur Components) string {
	data, err := st.Get(ctx, LastPath(pipeline, node))
	if err != nil {
		return ReasonNoEntry
	}
	var prev Components
	if err := json.Unmarshal(data, &prev); err != nil {
		return ReasonNoEntry + " (the last key's record is unreadable)"
	}
	reasons := Diff(prev, cur)
	if len(reasons) == 0 {
		// The same key as the last stored: its entry was removed.
		return ReasonNoEntry + " (removed)"
	}
	return Reason(reasons)
}

// ParseEntry decodes a stored entry and checks its shape.
func ParseEntry(data []byte) (*Entry, error) {
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, err
	}
	if e.Format != EntryFormat {
		return nil, fmt.Errorf("format %d, want %d", e.Format, EntryFormat)
	}
	if e.Key == "" || e.Run == "" {
		return nil, errors.New("no key or run")
	}
	return &e, nil
}

// Save stores e under its key and its components as the node's latest.
func Save(ctx context.Context, st Store, pipeline string, e Entry) error {
	e.Format = EntryFormat
	e.Key = e.Components.Key()
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode cache entry: %w", err)
	}
	if err := st.Put(ctx, EntryPath(e.Key), data); err != nil {
		return fmt.Errorf("store cache entry: %w", err)
	}
	return SaveLast(ctx, st, pipeline, e.Node, e.Components)
}

// SaveLast records c as the components of the node's latest key, so a
// later miss is explained against it.
func SaveLast(ctx context.Context, st Store, pipeline, node string, c Components) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode cache components: %w", err)
	}
	if err := st.Put(ctx, LastPath(pipeline, node), data); err != nil {
		return fmt.Errorf("store cache components: %w", err)
	}
	return nil
}
