// Package checkpoint is the `checkpoint` node type: it materialises a table
// as Parquet in the object store, from the CSV a command prints or from local
// CSV or Parquet files, and finds it again on a retry or rerun.
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/tabular"
)

// parseColumns reads declared column types. A mapping has no order once
// decoded, so they come sorted by name, and [inHeaderOrder] puts them in
// the data's order.
func parseColumns(in map[string]string) ([]tabular.Column, error) {
	if len(in) == 0 {
		return nil, nil
	}
	cols := make([]tabular.Column, 0, len(in))
	for _, name := range slices.Sorted(maps.Keys(in)) {
		typ, err := tabular.ParseType(in[name])
		if err != nil {
			return nil, fmt.Errorf("columns: %s: %w", name, err)
		}
		cols = append(cols, tabular.Column{Name: name, Type: typ})
	}
	return cols, nil
}

// inHeaderOrder orders declared columns as a CSV header lists them, so that
// the Parquet files keep the source's column order. Declared columns the
// header lacks go last, and header names not declared are skipped: the CSV
// reader reports both.
func inHeaderOrder(columns []tabular.Column, header []string) []tabular.Column {
	pos := make(map[string]int, len(header))
	for i, name := range header {
		pos[name] = i
	}
	out := slices.Clone(columns)
	slices.SortStableFunc(out, func(a, b tabular.Column) int {
		pa, oka := pos[a.Name]
		pb, okb := pos[b.Name]
		switch {
		case oka && okb:
			return pa - pb
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
	return out
}

// fileHeader reads the header row of the CSV file at path.
func fileHeader(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	header, err := tabular.CSVHeader(f)
	if err != nil {
		return nil, badData(fmt.Errorf("%s: %w", path, err))
	}
	return header, nil
}

// sourceFiles expands a file, folder or glob into data files, sorted.
func sourceFiles(source string) ([]string, error) {
	var files []string
	if st, err := os.Stat(source); err == nil && st.IsDir() {
		entries, err := os.ReadDir(source)
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() && dataFormat(e.Name()) != "" {
				files = append(files, filepath.Join(source, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("source: folder %s holds no .csv or .parquet files", source)
		}
		return files, nil
	} else if err == nil {
		return []string{source}, nil
	}
	matches, err := filepath.Glob(source)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", source, err)
	}
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() {
			files = append(files, m)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("source %q: no such file", source)
	}
	slices.Sort(files)
	return files, nil
}

func dataFormat(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv":
		return "csv"
	case ".parquet", ".pq":
		return "parquet"
	}
	return ""
}

func sourceFormat(format string, files []string) (string, error) {
	switch format {
	case "csv", "parquet":
		return format, nil
	case "":
	default:
		return "", fmt.Errorf("format %q: want csv or parquet", format)
	}
	if len(files) == 0 {
		return "csv", nil // a command prints CSV
	}
	for _, f := range files {
		got := dataFormat(f)
		if got == "" {
			return "", fmt.Errorf("source %s: cannot tell the format from the name; set format", f)
		}
		if format != "" && got != format {
			return "", fmt.Errorf("source mixes %s and %s files; set format or narrow source", format, got)
		}
		format = got
	}
	return format, nil
}

// inputsFingerprint digests the node's `with` block (upstream outputs in it
// are already resolved) and the contents of its source files: the same
// command, settings and data mean the same checkpoint.
func inputsFingerprint(with map[string]any, files []string) (string, error) {
	contents := make([]string, len(files))
	for i, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return "", fmt.Errorf("source: %w", err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("source: read %s: %w", path, err)
		}
		contents[i] = hex.EncodeToString(h.Sum(nil))
	}
	return checkpoint.Fingerprint(struct {
		With  map[string]any `json:"with"`
		Files []string       `json:"files,omitempty"`
	}{with, contents})
}
