package train

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/shard"
)

// Reading the split's units for shard_data (shards.go): a row group with
// ranged reads, or a whole file downloaded, and a piece of either written
// as a Parquet file of the split's schema.

// download copies one file of the split to local, checking its size
// against the manifest; the error names the file. It returns the bytes it
// read.
func download(ctx context.Context, store *s3store.Store, f checkpoint.File, local string) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		return 0, err
	}
	body, _, err := store.Get(ctx, f.Key)
	if err != nil {
		return 0, fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	defer body.Close()
	out, err := os.Create(local)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, body)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	if n != f.Size {
		return n, fmt.Errorf("read the split's file %s: %d bytes, the split's manifest says %d", f.Key, n, f.Size)
	}
	return n, nil
}

// copyRows writes rows [pc.Offset, pc.Offset+pc.Rows) of the Parquet file
// local into a Parquet file out (through a temporary name: a file there is
// whole).
func copyRows(local string, f checkpoint.File, pc shard.Piece, out string) error {
	in, err := os.Open(local)
	if err != nil {
		return err
	}
	defer in.Close()
	pf, err := parquet.OpenFile(in, f.Size)
	if err != nil {
		return fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	if pf.NumRows() != f.Rows {
		return fmt.Errorf("read the split's file %s: %d rows, the split's manifest says %d", f.Key, pf.NumRows(), f.Rows)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := copyRange(pf, pc, w); err != nil {
		w.Close()
		return fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// copyRange copies the piece's rows of pf to w as a Parquet file of the
// same schema.
func copyRange(pf *parquet.File, pc shard.Piece, w io.Writer) error {
	r := parquet.NewReader(pf)
	defer r.Close()
	return copyRowsOf(r, pf.Schema(), pc, w)
}

// rowSource is what copyRowsOf reads: a file's or a row group's rows.
type rowSource interface {
	parquet.RowReader
	parquet.RowSeeker
}

// copyRowsOf copies rows [pc.Offset, pc.Offset+pc.Rows) of r to w as a
// Parquet file of schema.
func copyRowsOf(r rowSource, schema *parquet.Schema, pc shard.Piece, w io.Writer) error {
	if err := r.SeekToRow(pc.Offset); err != nil {
		return err
	}
	pw := parquet.NewWriter(w, schema)
	buf := make([]parquet.Row, 1024)
	for left := pc.Rows; left > 0; {
		n, err := r.ReadRows(buf[:min(int64(len(buf)), left)])
		if n > 0 {
			if _, werr := pw.WriteRows(buf[:n]); werr != nil {
				return werr
			}
			left -= int64(n)
		}
		if errors.Is(err, io.EOF) && left > 0 {
			return fmt.Errorf("ends %d rows short of row %d", left, pc.Offset+pc.Rows)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return pw.Close()
}

// readAll reads a local Parquet file's rows as the split's loader takes
// them.
func readAll(name string) ([]any, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, err
	}
	r := parquet.NewGenericReader[any](pf)
	defer r.Close()
	rows := make([]any, pf.NumRows())
	n, err := r.Read(rows)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if int64(n) != pf.NumRows() {
		return nil, fmt.Errorf("read %d of %d rows", n, pf.NumRows())
	}
	return rows, nil
}

// footerFetch is how much of a file's end one ranged read fetches for its
// footer: a split file's footer is a few KiB, so one read is the rule.
const footerFetch = 64 << 10

// segment is bytes of a file from offset off.
type segment struct {
	off int64
	b   []byte
}

// sparseFile is a Parquet file of which only some byte ranges were
// fetched: a row group's and the footer. A read outside them fails.
type sparseFile struct {
	key  string
	segs []segment
}

func (s *sparseFile) ReadAt(p []byte, off int64) (int, error) {
	for _, sg := range s.segs {
		if off >= sg.off && off < sg.off+int64(len(sg.b)) {
			n := copy(p, sg.b[off-sg.off:])
			if n < len(p) {
				return n, fmt.Errorf("%s: read of %d bytes at %d runs past the %d fetched at %d", s.key, len(p), off, len(sg.b), sg.off)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: read of %d bytes at %d, outside what was fetched", s.key, len(p), off)
}

// openGroup fetches row group k of the split's file number file, f, and
// its footer (once per file: footers keeps them, by file) with ranged reads, and opens them as
// Parquet. It returns the bytes it read; an error names the file.
func openGroup(ctx context.Context, store *s3store.Store, file int, f checkpoint.File, k int, footers map[int]segment) (*parquet.File, int64, error) {
	var read int64
	fail := func(err error) (*parquet.File, int64, error) {
		return nil, read, fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	foot, ok := footers[file]
	if !ok {
		// The footer follows the last row group: fetch what follows it,
		// up to footerFetch, and more only if the footer is longer.
		var end int64
		for _, g := range f.RowGroups {
			end = max(end, g.Offset+g.Size)
		}
		n := min(f.Size-end, footerFetch)
		b, err := store.GetRange(ctx, f.Key, f.Size-n, n)
		read += int64(len(b))
		if err != nil {
			return fail(err)
		}
		if len(b) < 8 || string(b[len(b)-4:]) != "PAR1" {
			return fail(errors.New("no Parquet footer"))
		}
		need := int64(binary.LittleEndian.Uint32(b[len(b)-8:])) + 8
		if need > f.Size-4 {
			return fail(fmt.Errorf("a footer of %d bytes in a file of %d", need, f.Size))
		}
		if need > n {
			if b, err = store.GetRange(ctx, f.Key, f.Size-need, need); err != nil {
				return fail(err)
			}
			read += int64(len(b))
		}
		foot = segment{off: f.Size - int64(len(b)), b: b}
		footers[file] = foot
	}
	g := f.RowGroups[k]
	body, err := store.GetRange(ctx, f.Key, g.Offset, g.Size)
	read += int64(len(body))
	if err != nil {
		return fail(err)
	}
	sf := &sparseFile{key: f.Key, segs: []segment{{off: 0, b: []byte("PAR1")}, {off: g.Offset, b: body}, foot}}
	pf, err := parquet.OpenFile(sf, f.Size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fail(err)
	}
	if len(pf.RowGroups()) != len(f.RowGroups) || pf.RowGroups()[k].NumRows() != g.Rows {
		return fail(fmt.Errorf("its footer's row groups disagree with the split's manifest"))
	}
	return pf, read, nil
}

// writePiece writes the piece's rows of row group k of pf (offsets within
// the group) to out, through a temporary name.
func writePiece(pf *parquet.File, k int, f checkpoint.File, pc shard.Piece, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	rows := pf.RowGroups()[k].Rows()
	err = copyRowsOf(rows, pf.Schema(), pc, w)
	rows.Close()
	if err != nil {
		w.Close()
		return fmt.Errorf("read the split's file %s: %w", f.Key, err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
