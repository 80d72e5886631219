package lake

import (
	"container/list"
	"strings"
	"sync"
)

// metaCache keeps immutable files of the lake in memory, keyed by path,
// within a byte budget; the least recently used go first. One per catalog
// (so per worker process, shared by its activities): every scan, commit
// and plan of a table reads the same manifest list and manifests, and on
// S3 each read is a round trip. Such files never change once written
// (their names hold a UUID or a sequence number and a UUID), so a cached
// copy is never stale and needs no validation request. Data files are
// immutable too, and a run's nodes read what the previous node wrote
// (stats the staged files, promote the training and staged ones, split
// the promoted ones): files up to ReadConfig.WholeFileBytes are kept when
// written or read whole, so a worker that ran the previous node (the dev
// stack, a one-host deployment) reads them from memory.
type metaCache struct {
	budget int64

	mu    sync.Mutex
	used  int64
	order *list.List // of *metaEntry, most recently used first
	byKey map[string]*list.Element
	hits  int64
}

type metaEntry struct {
	key  string
	data []byte
}

func newMetaCache(budget int64) *metaCache {
	return &metaCache{budget: budget, order: list.New(), byKey: map[string]*list.Element{}}
}

// immutableMeta reports whether path names a metadata file that is never
// rewritten: manifest lists and manifests (*.avro) and table metadata
// (*.metadata.json) under a metadata folder. Not retrain's own files
// there (metadata/retrain-promotions/...: a redone group overwrites its
// file list under the same key), nor version hints.
func immutableMeta(path string) bool {
	if !strings.Contains(path, "/metadata/") || strings.Contains(path, "/retrain-promotions/") {
		return false
	}
	return strings.HasSuffix(path, ".avro") || strings.HasSuffix(path, ".metadata.json")
}

// immutableFile reports whether path names a file the lake never rewrites:
// immutable metadata, or a Parquet data file under a data folder (iceberg-go
// names each one it writes anew: a UUID, a task id and a counter).
func immutableFile(path string) bool {
	return immutableMeta(path) || (strings.Contains(path, "/data/") && strings.HasSuffix(path, ".parquet"))
}

// get returns the cached bytes of key (callers must not modify them).
func (c *metaCache) get(key string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	c.hits++
	return el.Value.(*metaEntry).data, true
}

// put caches data under key, evicting the least recently used entries
// until the budget holds it. A file larger than a quarter of the budget
// is not kept: it would evict most of what is there for one entry.
func (c *metaCache) put(key string, data []byte) {
	if c == nil || int64(len(data)) > c.budget/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	c.byKey[key] = c.order.PushFront(&metaEntry{key: key, data: data})
	c.used += int64(len(data))
	for c.used > c.budget {
		last := c.order.Back()
		e := last.Value.(*metaEntry)
		c.order.Remove(last)
		delete(c.byKey, e.key)
		c.used -= int64(len(e.data))
	}
}

// drop forgets key (its file was removed).
func (c *metaCache) drop(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.Remove(el)
		delete(c.byKey, key)
		c.used -= int64(len(el.Value.(*metaEntry).data))
	}
}

// stats are the cache's entries, bytes held and hits, for tests and logs.
func (c *metaCache) stats() (entries int, used, hits int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey), c.used, c.hits
}
