package nodecache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MaxFiles bounds the files one node's globs may name: a glob that matches
// a whole tree is a spec error, not a key.
const MaxFiles = 10000

// FileInputs are the content identities of the files a program node reads
// as code: each argument that names an existing regular file (the team's
// scripts: "python3 train.py" names train.py), and every file the globs
// match (what the scripts import). Relative names are read from dir.
// Arguments that are not files (flags, text) are in the `with` already.
func FileInputs(dir string, argv, globs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range argv {
		if a == "" || strings.ContainsRune(a, 0) || len(a) > 4096 {
			continue
		}
		p := a
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		h, err := hashFile(p)
		if err != nil {
			return nil, err
		}
		out[InputName(KindFile, a)] = h
	}
	var matched []string
	for _, g := range globs {
		pat := g
		if !filepath.IsAbs(pat) {
			pat = filepath.Join(dir, pat)
		}
		ms, err := filepath.Glob(pat)
		if err != nil {
			return nil, fmt.Errorf("cache files %q: %w", g, err)
		}
		matched = append(matched, ms...)
		if len(matched) > MaxFiles {
			return nil, fmt.Errorf("cache files match more than %d files", MaxFiles)
		}
	}
	slices.Sort(matched)
	for _, p := range slices.Compact(matched) {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		h, err := hashFile(p)
		if err != nil {
			return nil, err
		}
		name := p
		if rel, err := filepath.Rel(dir, p); err == nil && !strings.HasPrefix(rel, "..") {
			name = rel
		}
		out[InputName(KindFile, name)] = h
	}
	return out, nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
