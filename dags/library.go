package dags

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrNotFound is matched (errors.Is) by the error Library.Find returns for
// a name no file defines.
var ErrNotFound = errors.New("pipeline not found")

// Library is the set of pipeline files a worker or CLI knows: the *.yaml
// and *.yml files at the top of a file system, but test files
// (NAME.test.yaml, see IsTestFile). It reads the files on every
// call rather than caching them, so that a pipeline added or edited in the
// folder is seen at once; files are small and only their name is decoded.
type Library struct {
	fsys fs.FS
}

// NewLibrary returns a library of the pipeline files in fsys.
func NewLibrary(fsys fs.FS) *Library {
	return &Library{fsys: fsys}
}

// libEntry is one pipeline file.
type libEntry struct {
	file string // path in the FS
	name string // spec name, or "" if the file has none
	base string // file name without extension
	data []byte
}

// pipelineName is the pipeline's name: its spec name, else its file name.
func (e libEntry) pipelineName() string {
	if e.name != "" {
		return e.name
	}
	return e.base
}

// entries reads every pipeline file. Files starting with "." (editor and
// OS droppings) and test files (IsTestFile) are skipped.
func (l *Library) entries() ([]libEntry, error) {
	dir, err := fs.ReadDir(l.fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []libEntry
	for _, d := range dir {
		name := d.Name()
		ext := path.Ext(name)
		if d.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") || IsTestFile(name) {
			continue
		}
		data, err := fs.ReadFile(l.fsys, name)
		if err != nil {
			return nil, err
		}
		// Only the name matters here; a file that does not decode is still
		// listed (under its file name) so that Find hands it to Parse, which
		// reports its errors properly.
		var head struct {
			Name yaml.Node `yaml:"name"`
		}
		var specName string
		if yaml.Unmarshal(data, &head) == nil && head.Name.Kind == yaml.ScalarNode && head.Name.ShortTag() != "!!null" {
			specName = head.Name.Value // as Parse reads it: `name: 2026` is "2026"
		}
		out = append(out, libEntry{file: name, name: specName, base: strings.TrimSuffix(name, ext), data: data})
	}
	return out, nil
}

// Find returns the file defining the named pipeline and its contents. A
// pipeline is found by its spec name, or failing that by its file name
// without extension. Two files claiming the name is an error naming both.
func (l *Library) Find(name string) (file string, data []byte, err error) {
	entries, err := l.entries()
	if err != nil {
		return "", nil, err
	}
	var match []libEntry
	for _, e := range entries {
		if e.name == name {
			match = append(match, e)
		}
	}
	if len(match) == 0 {
		for _, e := range entries {
			if e.base == name {
				match = append(match, e)
			}
		}
	}
	switch len(match) {
	case 0:
		return "", nil, &notFoundError{name: name, known: slices.Sorted(maps.Keys(filesByName(entries)))}
	case 1:
		return match[0].file, match[0].data, nil
	}
	files := make([]string, len(match))
	for i, e := range match {
		files[i] = e.file
	}
	return "", nil, ambiguous(name, files)
}

// List returns the names of the pipelines in the library, sorted. If two
// files define the same name, the name is listed once and the error names
// the files.
func (l *Library) List() ([]string, error) {
	entries, err := l.entries()
	if err != nil {
		return nil, err
	}
	files := filesByName(entries)
	names := slices.Sorted(maps.Keys(files))
	var errs []error
	for _, name := range names {
		if f := files[name]; len(f) > 1 {
			errs = append(errs, ambiguous(name, f))
		}
	}
	return names, errors.Join(errs...)
}

// filesByName groups the entries' files by pipeline name.
func filesByName(entries []libEntry) map[string][]string {
	files := map[string][]string{}
	for _, e := range entries {
		files[e.pipelineName()] = append(files[e.pipelineName()], e.file)
	}
	return files
}

func ambiguous(name string, files []string) error {
	return fmt.Errorf("pipeline %q is defined by more than one file: %s", name, strings.Join(files, ", "))
}

type notFoundError struct {
	name  string
	known []string
}

func (e *notFoundError) Error() string {
	return fmt.Sprintf("pipeline %q not found; known pipelines: %s", e.name, listOrNone(e.known))
}

func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }
