package objects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/retrain-ml/retrain/nodetype"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/s3store"
)

// StoreKey turns a URI a node was given (s3://bucket/prefix/key, or a key
// relative to the store's prefix) into a key of store. A URI outside the
// store's bucket and prefix is bad input: this worker could not read it.
func StoreKey(store *s3store.Store, uri string) (string, error) {
	if !strings.HasPrefix(uri, "s3://") {
		key := strings.TrimPrefix(uri, "/")
		return key, s3store.ValidateKey(strings.TrimSuffix(key, "/"))
	}
	u, err := s3store.ParseURI(uri)
	if err != nil {
		return "", err
	}
	root := store.URI()
	prefix := strings.TrimSuffix(root.Key, "/")
	if prefix != "" {
		prefix += "/"
	}
	if u.Bucket != root.Bucket || !strings.HasPrefix(u.Key, prefix) {
		return "", fmt.Errorf("%s is outside this worker's object store %s", uri, root)
	}
	return strings.TrimPrefix(u.Key, prefix), nil
}

// KeyURI is the s3:// URI of a key of store.
func KeyURI(store *s3store.Store, key string) string { return store.URI().Join(key).String() }

// PutJSON stores v as indented JSON at key.
func PutJSON(ctx context.Context, store *s3store.Store, key string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	_, err = store.PutBytes(ctx, key, b)
	return err
}

// GetJSON reads the JSON at key into v.
func GetJSON(ctx context.Context, store *s3store.Store, key string, v any) error {
	b, _, err := store.GetBytes(ctx, key)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// UploadDir copies the regular files below dir to prefix (a folder key
// ending in /), keeping their relative paths.
func UploadDir(ctx context.Context, store *s3store.Store, dir, prefix string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := store.Put(ctx, prefix+filepath.ToSlash(rel), f); err != nil {
			return err
		}
		n++
		return nil
	})
	return n, err
}

// DownloadPrefix copies every object below prefix (a folder key ending in
// /) into dir, keeping the paths below the prefix.
func DownloadPrefix(ctx context.Context, store *s3store.Store, prefix, dir string) (int, error) {
	n := 0
	for o, err := range store.List(ctx, prefix) {
		if err != nil {
			return n, err
		}
		rel := strings.TrimPrefix(o.Key, prefix)
		if rel == "" || strings.HasSuffix(rel, "/") {
			continue
		}
		if err := DownloadFile(ctx, store, o.Key, filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: nothing below %s", s3store.ErrNotFound, KeyURI(store, prefix))
	}
	return n, nil
}

func DownloadFile(ctx context.Context, store *s3store.Store, key, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	body, _, err := store.Get(ctx, key)
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadObject reads a whole (small) object.
func ReadObject(ctx context.Context, store *s3store.Store, key string) ([]byte, error) {
	b, _, err := store.GetBytes(ctx, key)
	return b, err
}

// StoreError classifies an object store error: a missing object or a bad
// key will not appear on retry; anything else (the network, the server) may
// go away.
func StoreError(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, s3store.ErrNotFound) || errors.Is(err, s3store.ErrInvalidKey) {
		return nodetype.Permanent(errtype.BadInput, "%s: %v", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// LocalDir returns a local folder holding the files of dir: dir itself,
// or, for an s3:// folder of the store (a train node's model_uri), a
// temporary copy that cleanup removes. Registration then hashes the same
// bytes wherever the folder came from.
func LocalDir(ctx context.Context, store *s3store.Store, dir string) (string, func(), error) {
	if !strings.HasPrefix(dir, "s3://") {
		return dir, func() {}, nil
	}
	if store == nil {
		return "", nil, NoStore()
	}
	key, err := StoreKey(store, dir)
	if err != nil {
		return "", nil, nodetype.Permanent(errtype.BadInput, "dir: %v", err)
	}
	tmp, err := os.MkdirTemp("", "retrain-deploy-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	if _, err := DownloadPrefix(ctx, store, strings.TrimSuffix(key, "/")+"/", tmp); err != nil {
		cleanup()
		return "", nil, StoreError("dir "+dir, err)
	}
	return tmp, cleanup, nil
}

// NoStore is the error of a node that needs the object store on a worker
// started without one.
func NoStore() error {
	return nodetype.Permanent(errtype.NoObjectStore, "this worker has no object store for checkpoints and models: start it with --s3-uri s3://bucket/prefix (or RETRAIN_S3_URI), or --data-dir of a `retrain dev` stack")
}

// Identity is the content identity of the object at uri, for the node
// cache: its full-object CRC32C when the server recorded one, else its
// ETag. A folder (a URI ending in /) has none: name an object in it.
func Identity(ctx context.Context, store *s3store.Store, uri string) (string, error) {
	key, err := StoreKey(store, uri)
	if err != nil {
		return "", err
	}
	info, err := store.Head(ctx, key)
	if err != nil {
		return "", fmt.Errorf("%s: %w", uri, err)
	}
	if info.CRC32C != "" {
		return "crc32c:" + info.CRC32C, nil
	}
	return "etag:" + strings.Trim(info.ETag, `"`), nil
}

// Gone says why what uri names is no longer in store ("" when it is): an
// object that is not there, or a folder (a URI ending in /) that holds
// nothing. What a cached result points to is checked this way before the
// result is served.
func Gone(ctx context.Context, store *s3store.Store, uri string) (string, error) {
	key, err := StoreKey(store, uri)
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(key, "/") {
		for _, err := range store.List(ctx, key) {
			if err != nil {
				return "", err
			}
			return "", nil
		}
		return uri + " was removed", nil
	}
	if _, err := store.Head(ctx, key); errors.Is(err, s3store.ErrNotFound) {
		return uri + " was removed", nil
	} else if err != nil {
		return "", err
	}
	return "", nil
}
