package lake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// The table queue's key. A queue's workflow id, and the proof its input
// carries that a retrain worker started it, are HMACs under a key the
// workers of a deployment share and clients of Temporal do not have, so a
// client can neither start a workflow under a queue's id before the
// workers do nor pass off a workflow it started as a queue (see
// TableQueueEnqueue). Where the key comes from, first found wins:
//
//  1. RETRAIN_TABLE_QUEUE_KEY, else the file table-queue.key in the
//     worker's --secrets-dir: the operator's key (at least 16 bytes). The
//     file's name is not a ${secret.NAME} a spec may read.
//  2. The object _retrain/table-queue.key in the worker's object store:
//     made at random by the first worker that needs it (create-if-absent,
//     so all workers of the store agree), read by the others.
//  3. Neither: a random key of this worker process. Its promotions still
//     take turns with each other, but not with other workers' (those go
//     on the commit's compare-and-swap); the worker logs this once.
const (
	QueueKeyEnv     = "RETRAIN_TABLE_QUEUE_KEY"
	QueueKeyFile    = "table-queue.key"
	queueKeyObject  = "_retrain/table-queue.key"
	queueKeyMinSize = 16
)

// queueKeys resolves the key once per worker, and again after a failure
// (an unreachable store is retried by the next promotion).
type queueKeys struct {
	SecretsDir string
	Store      *s3store.Store

	mu     sync.Mutex
	key    []byte
	source string
}

// get returns the key and where it came from (for the log; never the key).
func (k *queueKeys) get(ctx context.Context) ([]byte, string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, k.source, nil
	}
	key, source, err := k.resolve(ctx)
	if err != nil {
		return nil, "", err
	}
	k.key, k.source = key, source
	return key, source, nil
}

func (k *queueKeys) resolve(ctx context.Context) ([]byte, string, error) {
	if v, ok := os.LookupEnv(QueueKeyEnv); ok {
		return operatorKey([]byte(v), QueueKeyEnv)
	}
	if k.SecretsDir != "" {
		b, err := os.ReadFile(filepath.Join(k.SecretsDir, QueueKeyFile))
		switch {
		case err == nil:
			return operatorKey(bytes.TrimRight(b, "\r\n"), "the secrets folder's "+QueueKeyFile)
		case !errors.Is(err, os.ErrNotExist):
			return nil, "", fmt.Errorf("table queue key: cannot read %s from the secrets folder: %v", QueueKeyFile, errors.Unwrap(err))
		}
	}
	if k.Store != nil {
		key, err := storeKey(ctx, k.Store)
		if err != nil {
			return nil, "", err
		}
		return key, "the object store's " + queueKeyObject, nil
	}
	key, err := randomKey()
	return key, "this worker process (no key configured and no object store: its promotions take turns only with each other)", err
}

func operatorKey(b []byte, where string) ([]byte, string, error) {
	if len(b) < queueKeyMinSize {
		// The length only: a short key is still a secret.
		return nil, "", fmt.Errorf("table queue key from %s is %d bytes; it must be at least %d", where, len(b), queueKeyMinSize)
	}
	return b, where, nil
}

func randomKey() ([]byte, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("table queue key: %w", err)
	}
	return []byte(hex.EncodeToString(b)), nil
}

// storeKey reads the deployment's key from the store, making it if it is
// not there; of workers racing to make it, one wins and all read its.
func storeKey(ctx context.Context, s *s3store.Store) ([]byte, error) {
	b, _, err := s.GetBytes(ctx, queueKeyObject)
	if errors.Is(err, s3store.ErrNotFound) {
		fresh, rerr := randomKey()
		if rerr != nil {
			return nil, rerr
		}
		_, err = s.PutIfAbsent(ctx, queueKeyObject, bytes.NewReader(fresh))
		if err == nil {
			return fresh, nil
		}
		if !errors.Is(err, s3store.ErrExists) {
			return nil, fmt.Errorf("table queue key: make %s: %w", queueKeyObject, err)
		}
		b, _, err = s.GetBytes(ctx, queueKeyObject)
	}
	if err != nil {
		return nil, fmt.Errorf("table queue key: read %s: %w", queueKeyObject, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < queueKeyMinSize {
		return nil, fmt.Errorf("table queue key: %s is %d bytes; it must be at least %d", queueKeyObject, len(b), queueKeyMinSize)
	}
	return b, nil
}

// queueMAC is the HMAC-SHA256 of the parts under key, hex, truncated to
// 128 bits: enough that no one guesses it, short enough for an id. Parts
// are joined with NUL, which names do not hold.
func queueMAC(key []byte, parts ...string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// tableQueueID is the workflow id of a table's queue: per task queue (its
// workers run the queue workflow) and per catalog (two lakes may both hold
// an ml.training), keyed so that only the workers can name it. The
// catalog's identity (type, host, port, database, user, warehouse; never
// a password) goes into the MAC only, not into the id.
func tableQueueID(key []byte, taskQueue, catalogIdentity, tbl string) string {
	return "retrain-table-queue/" + taskQueue + "/" + tbl + "/" + queueMAC(key, "id", taskQueue, catalogIdentity, tbl)
}

// queueProof is what a queue started by a retrain worker carries in its
// input (QueueState.Proof): a MAC of its id.
func queueProof(key []byte, id string) string {
	return queueMAC(key, "proof", id)
}

// validProof reports whether proof is queueProof(key, id), in constant time.
func validProof(key []byte, id, proof string) bool {
	return hmac.Equal([]byte(proof), []byte(queueProof(key, id)))
}

// TableQueueID is the workflow id of table tbl's queue for the workers of
// taskQueue on catalog cat whose queue key is key: for operators and
// tests that hold the key (a client without it cannot compute it).
func TableQueueID(key []byte, taskQueue string, cat lake.Config, tbl string) string {
	return tableQueueID(key, taskQueue, cat.Identity().Key(), tbl)
}
