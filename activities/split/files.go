package split

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// FilesRead says which Parquet files a split from `files:` read, as the
// snapshot id says it for a table: the record and the outputs carry it.
type FilesRead struct {
	Patterns []string `json:"patterns"`
	// Matched files the patterns name; Pruned of them were skipped by a
	// <date_column>=YYYY-MM-DD folder outside the window and never opened.
	Matched int `json:"matched"`
	Pruned  int `json:"pruned"`
	// Read files were opened (their footers at least), Bytes their sizes.
	Read  int      `json:"read"`
	Bytes int64    `json:"bytes"`
	Files []string `json:"files"` // the files read, URIs or local paths
	// RowGroups were read; RowGroupsPruned skipped by their date column's
	// min/max statistics.
	RowGroups       int `json:"row_groups"`
	RowGroupsPruned int `json:"row_groups_pruned"`
	// Joined says what each joined file set read (join:), in order: its
	// files are opened day by day, so a file may count more than once.
	Joined []*FilesRead `json:"joined,omitempty"`
}

// String is the files part of the split's summary line.
func (f *FilesRead) String() string {
	s := fmt.Sprintf("%d of %d files read (%d bytes), %d row groups", f.Read, f.Matched, f.Bytes, f.RowGroups)
	if f.Pruned > 0 || f.RowGroupsPruned > 0 {
		s += fmt.Sprintf("; pruned by date: %d files, %d row groups", f.Pruned, f.RowGroupsPruned)
	}
	return s
}

// sourceFile is one Parquet file a `files:` pattern matched.
type sourceFile struct {
	Name    string // as the record shows it: s3:// URI or local path
	Key     string // store key of an s3:// file; "" for a local one
	Path    string // local path; "" for an s3:// file
	Size    int64
	Version string // ETag or modification time: a changed file redoes the split
}

// filePatterns reads `files:`, a string or a list of strings.
func filePatterns(v any) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if x == "" {
			return nil, nil
		}
		return []string{x}, nil
	case []string:
		return x, nil
	case []any:
		out := make([]string, 0, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok || s == "" {
				return nil, fmt.Errorf("files[%d]: want a file, folder or glob (local or s3://), got %v", i, e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("files: want a glob or a list of globs (local or s3://), got %T", v)
}

// checkSource validates at validation time that a split names exactly
// one source, and what goes with each.
func checkSource(with map[string]any) error {
	tbl, hasTable := with["table"]
	files, hasFiles := with["files"]
	if t, ok := tbl.(string); hasTable && ok && t == "" {
		hasTable = false
	}
	switch {
	case hasTable && hasFiles:
		return fmt.Errorf("give table (an Iceberg table) or files (Parquet files), not both")
	case !hasTable && !hasFiles:
		return fmt.Errorf("give table (namespace.table of the training data) or files (Parquet files by glob, local or s3://)")
	case !hasFiles:
		if list, ok := with["join"].([]any); ok {
			for i, e := range list {
				if m, ok := e.(map[string]any); ok && m["files"] != nil {
					return fmt.Errorf("join[%d]: a split of a table joins staging tables (table:); files join a split of files", i)
				}
			}
		}
		return nil
	}
	if _, ok := with["snapshot_id"]; ok {
		return fmt.Errorf("snapshot_id works with table only: files have no snapshots")
	}
	if list, ok := with["join"].([]any); ok {
		for i, e := range list {
			if m, ok := e.(map[string]any); ok && m["files"] == nil {
				return fmt.Errorf("join[%d]: a split of files joins files (files:, keys, alignment), not staging tables", i)
			}
		}
	}
	if s, ok := files.(string); ok && dags.HasRef(s) {
		return nil
	}
	ps, err := filePatterns(files)
	if err == nil && len(ps) == 0 {
		err = fmt.Errorf("files: give at least one file, folder or glob")
	}
	return err
}

// globMeta reports whether p holds a glob character.
func globMeta(p string) bool { return strings.ContainsAny(p, "*?[") }

// expandFiles lists the Parquet files the patterns name, sorted and
// without duplicates. An s3:// pattern must be inside the worker's object
// store; a local one inside the folders the worker allows, so a client
// cannot make the worker read files it chose. A pattern ending in / names
// every .parquet file below it; a pattern that matches nothing is an error.
func expandFiles(ctx context.Context, store *s3store.Store, env progenv.Policy, patterns []string) ([]sourceFile, error) {
	seen := map[string]bool{}
	var out []sourceFile
	for _, p := range patterns {
		var got []sourceFile
		var err error
		if strings.HasPrefix(p, "s3://") {
			got, err = expandS3(ctx, store, p)
		} else {
			got, err = expandLocal(env, p)
		}
		if err != nil {
			return nil, err
		}
		if len(got) == 0 {
			return nil, fmt.Errorf("%w: files: %s matches no Parquet file", errSplitInput, p)
		}
		for _, f := range got {
			if !seen[f.Name] {
				seen[f.Name] = true
				out = append(out, f)
			}
		}
	}
	slices.SortFunc(out, func(a, b sourceFile) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func expandS3(ctx context.Context, store *s3store.Store, p string) ([]sourceFile, error) {
	if store == nil {
		return nil, objects.NoStore()
	}
	key, err := objects.StoreKey(store, p)
	if err != nil {
		return nil, fmt.Errorf("%w: files: %v", errSplitInput, err)
	}
	folder := strings.HasSuffix(key, "/") || key == ""
	// List below the literal folder before the first glob character.
	list := key
	if i := strings.IndexAny(key, "*?["); i >= 0 {
		list = key[:strings.LastIndex(key[:i], "/")+1]
	}
	var out []sourceFile
	for o, err := range store.List(ctx, list) {
		if err != nil {
			return nil, objects.StoreError("files: list "+p, err)
		}
		var ok bool
		switch {
		case globMeta(key):
			ok, err = path.Match(key, o.Key)
			if err != nil {
				return nil, fmt.Errorf("%w: files: %s: %v", errSplitInput, p, err)
			}
		case folder:
			ok = strings.HasSuffix(o.Key, ".parquet")
		default:
			ok = o.Key == key
		}
		if ok {
			out = append(out, sourceFile{Name: objects.KeyURI(store, o.Key), Key: o.Key, Size: o.Size, Version: o.ETag})
		}
	}
	return out, nil
}

func expandLocal(env progenv.Policy, p string) ([]sourceFile, error) {
	if err := env.CheckPath("files", p); err != nil {
		return nil, err
	}
	var paths []string
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		err := filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(q, ".parquet") {
				paths = append(paths, q)
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%w: files: %s: %v", errSplitInput, p, err)
		}
	} else {
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("%w: files: %s: %v", errSplitInput, p, err)
		}
		paths = m
	}
	var out []sourceFile
	for _, q := range paths {
		// Again per file: a symlink below an allowed folder may lead out.
		if err := env.CheckPath("files", q); err != nil {
			return nil, err
		}
		st, err := os.Stat(q)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		out = append(out, sourceFile{Name: q, Path: q, Size: st.Size(), Version: st.ModTime().UTC().String()})
	}
	return out, nil
}

// filesError classifies an error of listing or opening the split's files:
// a file or pattern that cannot be split is bad input no retry fixes.
func filesError(err error) error {
	if errors.Is(err, errSplitInput) {
		return nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	return err
}
