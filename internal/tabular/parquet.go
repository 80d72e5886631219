package tabular

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
)

// ParquetFile is an open Parquet file read row by row.
type ParquetFile struct {
	f      *os.File
	pf     *parquet.File
	groups []parquet.RowGroup
	cur    parquet.Rows
	rows   int64
}

// OpenParquet opens the Parquet file at path.
func OpenParquet(path string) (*ParquetFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tabular: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tabular: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tabular: %s is not a readable Parquet file: %w", path, err)
	}
	return &ParquetFile{f: f, pf: pf, groups: pf.RowGroups()}, nil
}

// Schema returns the file's schema.
func (p *ParquetFile) Schema() *parquet.Schema { return p.pf.Schema() }

// NumRows returns the row count the file's footer records.
func (p *ParquetFile) NumRows() int64 { return p.pf.NumRows() }

// ReadRows reads up to len(rows) rows in the file's schema; io.EOF after
// the last one.
func (p *ParquetFile) ReadRows(rows []parquet.Row) (int, error) {
	for {
		if p.cur == nil {
			if len(p.groups) == 0 {
				return 0, io.EOF
			}
			p.cur = p.groups[0].Rows()
			p.groups = p.groups[1:]
		}
		n, err := p.cur.ReadRows(rows)
		p.rows += int64(n)
		if errors.Is(err, io.EOF) {
			if cerr := p.cur.Close(); cerr != nil {
				return n, fmt.Errorf("tabular: %s: %w", p.f.Name(), cerr)
			}
			p.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err != nil {
			return n, fmt.Errorf("tabular: %s: %w", p.f.Name(), err)
		}
		return n, nil
	}
}

// Close closes the file.
func (p *ParquetFile) Close() error {
	if p.cur != nil {
		p.cur.Close()
		p.cur = nil
	}
	return p.f.Close()
}
