package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/internal/s3store"
)

// SetRetention asks the server to expire checkpoint objects days after they
// were written, with a bucket lifecycle rule on the checkpoints folder. It
// reports whether the server accepted the rule; servers without lifecycle
// support (versitygw) are not an error, since [GC] does the same job.
func SetRetention(ctx context.Context, store *s3store.Store, days int) (bool, error) {
	err := store.SetExpiration(ctx, root, days)
	if errors.Is(err, s3store.ErrNotImplemented) {
		store.Logger().InfoContext(ctx, "checkpoint: server has no lifecycle rules; run GC to expire checkpoints", "days", days)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checkpoint: set retention: %w", err)
	}
	return true, nil
}

// GCReport says what [GC] found and deleted.
type GCReport struct {
	Complete          int   // complete checkpoints found
	Incomplete        int   // checkpoint folders without a manifest found
	DeletedComplete   int   // complete checkpoints deleted
	DeletedIncomplete int   // incomplete checkpoints deleted
	DeletedAttempts   int   // stale attempts of kept checkpoints deleted
	DeletedObjects    int   // objects deleted in all
	DeletedBytes      int64 // bytes those objects held
	AbortedUploads    int   // unfinished multipart uploads aborted
}

// GC deletes checkpoints older than olderThan:
//
//   - a complete checkpoint when its manifest is older; the manifest goes
//     first, so that a checkpoint is never complete with files missing;
//   - an incomplete one (crashed or failed attempts, no manifest) when its
//     newest object is older, which spares attempts still writing;
//   - in a checkpoint that is kept, the files of other attempts than the one
//     that committed, when they are older.
//
// GC keeps going after a failed deletion and returns the first error with
// the report of what it did.
func GC(ctx context.Context, store *s3store.Store, olderThan time.Duration) (GCReport, error) {
	g := &gc{store: store, cutoff: time.Now().Add(-olderThan)}
	var cur *group
	for o, err := range store.List(ctx, root) {
		if err != nil {
			return g.report, fmt.Errorf("checkpoint: gc: %w", err)
		}
		dir, ok := checkpointDir(o.Key)
		if !ok {
			continue // not laid out by this package; not ours to judge
		}
		if cur != nil && cur.dir != dir {
			g.collect(ctx, cur)
			cur = nil
		}
		if cur == nil {
			cur = &group{dir: dir}
		}
		cur.objects = append(cur.objects, o)
	}
	if cur != nil {
		g.collect(ctx, cur)
	}
	// Attempts that died mid-upload leave invisible parts behind.
	n, err := store.AbortUploads(ctx, root, olderThan)
	g.report.AbortedUploads = n
	if err != nil {
		g.fail(err)
	}
	store.Logger().InfoContext(ctx, "checkpoint: gc done", "older_than", olderThan,
		"deleted_complete", g.report.DeletedComplete, "deleted_incomplete", g.report.DeletedIncomplete,
		"deleted_attempts", g.report.DeletedAttempts, "objects", g.report.DeletedObjects, "bytes", g.report.DeletedBytes,
		"aborted_uploads", g.report.AbortedUploads)
	return g.report, g.err
}

type gc struct {
	store  *s3store.Store
	cutoff time.Time
	report GCReport
	err    error
}

// group is the objects of one checkpoint folder.
type group struct {
	dir     string
	objects []s3store.ObjectInfo
}

// checkpointDir returns checkpoints/P/R/N/F/ for a key below it.
func checkpointDir(key string) (string, bool) {
	parts := strings.SplitN(key, "/", 6)
	if len(parts) < 6 {
		return "", false
	}
	return strings.Join(parts[:5], "/") + "/", true
}

func (g *gc) collect(ctx context.Context, grp *group) {
	var manifest *s3store.ObjectInfo
	newest := time.Time{}
	for i, o := range grp.objects {
		if o.Key == grp.dir+manifestName {
			manifest = &grp.objects[i]
		}
		if o.LastModified.After(newest) {
			newest = o.LastModified
		}
	}
	if manifest == nil {
		g.report.Incomplete++
		if newest.Before(g.cutoff) && g.deleteAll(ctx, grp, grp.objects) {
			g.report.DeletedIncomplete++
		}
		return
	}
	g.report.Complete++
	if manifest.LastModified.Before(g.cutoff) {
		if err := g.store.Delete(ctx, manifest.Key); err != nil {
			g.fail(err)
			return
		}
		g.count(*manifest)
		var rest []s3store.ObjectInfo
		for _, o := range grp.objects {
			if o.Key != manifest.Key {
				rest = append(rest, o)
			}
		}
		if g.deleteAll(ctx, grp, rest) {
			g.report.DeletedComplete++
		}
		return
	}
	g.collectAttempts(ctx, grp)
}

// collectAttempts deletes old attempts of a kept checkpoint other than the
// one its manifest names.
func (g *gc) collectAttempts(ctx context.Context, grp *group) {
	attempts := map[string][]s3store.ObjectInfo{}
	for _, o := range grp.objects {
		attempt, _, ok := strings.Cut(strings.TrimPrefix(o.Key, grp.dir), "/")
		if ok {
			attempts[attempt] = append(attempts[attempt], o)
		}
	}
	if len(attempts) <= 1 {
		return
	}
	m, err := loadManifest(ctx, g.store, grp.dir+manifestName)
	if err != nil {
		g.fail(err)
		return
	}
	for attempt, objs := range attempts {
		if attempt == m.Attempt {
			continue
		}
		old := true
		for _, o := range objs {
			old = old && o.LastModified.Before(g.cutoff)
		}
		if old && g.deleteAll(ctx, grp, objs) {
			g.report.DeletedAttempts++
		}
	}
}

// deleteAll deletes objs and reports whether all went.
func (g *gc) deleteAll(ctx context.Context, grp *group, objs []s3store.ObjectInfo) bool {
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	n, err := g.store.DeleteKeys(ctx, keys)
	for _, o := range objs[:n] {
		g.count(o)
	}
	if err != nil {
		g.fail(err)
		return false
	}
	g.store.Logger().DebugContext(ctx, "checkpoint: gc deleted", "dir", grp.dir, "objects", n)
	return true
}

func (g *gc) count(o s3store.ObjectInfo) {
	g.report.DeletedObjects++
	g.report.DeletedBytes += o.Size
}

func (g *gc) fail(err error) {
	if g.err == nil {
		g.err = fmt.Errorf("checkpoint: gc: %w", err)
	}
}
