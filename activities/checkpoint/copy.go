package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/tabular"
)

// rowSource is what a dataset is copied from.
type rowSource interface {
	ReadRows([]parquet.Row) (int, error)
}

// copyRows moves every row of src into d.
func copyRows(d *checkpoint.RowWriter, src rowSource) error {
	buf := make([]parquet.Row, rowBatch)
	for {
		n, err := src.ReadRows(buf)
		if n > 0 {
			if _, werr := d.WriteRows(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func fromCSVFiles(cw *checkpoint.Writer, name string, files []string, columns []tabular.Column, opts checkpoint.Options) (checkpoint.Ref, error) {
	if columns == nil {
		var err error
		if columns, err = inferFiles(files); err != nil {
			return checkpoint.Ref{}, err
		}
	} else {
		header, err := fileHeader(files[0])
		if err != nil {
			return checkpoint.Ref{}, err
		}
		columns = inHeaderOrder(columns, header)
	}
	schema, err := tabular.Schema(columns)
	if err != nil {
		return checkpoint.Ref{}, badData(err)
	}
	d, err := checkpoint.CreateRows(cw, name, schema, opts)
	if err != nil {
		return checkpoint.Ref{}, err
	}
	for _, path := range files {
		if err := copyCSVFile(d, path, columns); err != nil {
			return checkpoint.Ref{}, err
		}
	}
	return d.Close()
}

func copyCSVFile(d *checkpoint.RowWriter, path string, columns []tabular.Column) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := tabular.NewCSVReader(f, columns)
	if err != nil {
		return badData(fmt.Errorf("%s: %w", path, err))
	}
	if err := copyRows(d, r); err != nil {
		if isTabular(err) {
			return badData(fmt.Errorf("%s: %w", path, err))
		}
		return err
	}
	return nil
}

// isTabular tells a data error of package tabular from a write error.
func isTabular(err error) bool { return strings.HasPrefix(err.Error(), "tabular: ") }

// inferFiles infers the columns of CSV files, which must share a header
// (in any order): a column takes the widest type any file needs, and the
// columns the first file's order.
func inferFiles(files []string) ([]tabular.Column, error) {
	var cols []tabular.Column
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		got, err := tabular.InferCSV(f)
		f.Close()
		if err != nil {
			return nil, badData(fmt.Errorf("%s: %w", path, err))
		}
		if cols == nil {
			cols = got
			continue
		}
		if cols, err = widen(cols, got); err != nil {
			return nil, badData(fmt.Errorf("%s: %w", path, err))
		}
	}
	return cols, nil
}

func widen(a, b []tabular.Column) ([]tabular.Column, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("has %d columns, the first file %d", len(b), len(a))
	}
	rank := map[tabular.Type]int{tabular.Int64: 0, tabular.Double: 1, tabular.Bool: 2, tabular.String: 3}
	byName := make(map[string]tabular.Type, len(b))
	for _, c := range b {
		byName[c.Name] = c.Type
	}
	out := slices.Clone(a)
	for i, c := range out {
		t, ok := byName[c.Name]
		if !ok {
			return nil, fmt.Errorf("has no column %q, which the first file has", c.Name)
		}
		switch {
		case t == c.Type:
		case rank[t] <= rank[tabular.Double] && rank[c.Type] <= rank[tabular.Double]:
			out[i].Type = tabular.Double // int64 and double mix as double
		default:
			out[i].Type = tabular.String
		}
	}
	return out, nil
}

func fromParquet(cw *checkpoint.Writer, name string, files []string, opts checkpoint.Options) (checkpoint.Ref, error) {
	var d *checkpoint.RowWriter
	var first string
	for _, path := range files {
		pf, err := tabular.OpenParquet(path)
		if err != nil {
			return checkpoint.Ref{}, badData(err)
		}
		if d == nil {
			first = path
			if d, err = checkpoint.CreateRows(cw, name, pf.Schema(), opts); err != nil {
				pf.Close()
				return checkpoint.Ref{}, err
			}
		} else if !parquet.EqualNodes(d.Schema(), pf.Schema()) {
			pf.Close()
			return checkpoint.Ref{}, badData(fmt.Errorf("%s has another schema than %s", path, first))
		}
		err = copyRows(d, pf)
		pf.Close()
		if err != nil {
			if isTabular(err) {
				return checkpoint.Ref{}, badData(err)
			}
			return checkpoint.Ref{}, err
		}
	}
	return d.Close()
}
