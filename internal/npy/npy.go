// Package npy writes and reads NumPy's .npy format (version 1.0): a short
// header naming the dtype and shape, then the array's bytes, little-endian
// and C order. It is how a trainer program gets a split without Parquet
// libraries: numpy.load reads these files as they are.
package npy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

var magic = []byte("\x93NUMPY")

// Number is an element type the package writes.
type Number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8
}

// descr is NumPy's dtype string of T.
func descr[T Number]() string {
	var zero T
	switch any(zero).(type) {
	case float32:
		return "<f4"
	case float64:
		return "<f8"
	case int32:
		return "<i4"
	case int64:
		return "<i8"
	case uint8:
		return "|u1"
	}
	panic(fmt.Sprintf("npy: unsupported element type %T", zero))
}

// Write writes data as an array of the given shape (nil or empty: a 1-d
// array of len(data)). The shape's product must be len(data).
func Write[T Number](w io.Writer, data []T, shape ...int) error {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("npy: negative dimension in shape %v", shape)
		}
		n *= d
	}
	if n != len(data) {
		return fmt.Errorf("npy: shape %v holds %d elements, data has %d", shape, n, len(data))
	}
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr[T](), tuple)
	// Magic, version and length take 10 bytes; the header is padded with
	// spaces and ends in a newline so the data starts 64-byte aligned.
	total := 10 + len(header) + 1
	pad := (64 - total%64) % 64
	header += strings.Repeat(" ", pad) + "\n"
	if len(header) > 0xffff {
		return errors.New("npy: header too long")
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.Write(magic)
	bw.Write([]byte{1, 0})
	binary.Write(bw, binary.LittleEndian, uint16(len(header)))
	bw.WriteString(header)
	if err := binary.Write(bw, binary.LittleEndian, data); err != nil {
		return fmt.Errorf("npy: write data: %w", err)
	}
	return bw.Flush()
}

// WriteFile writes data to path (see Write).
func WriteFile[T Number](path string, data []T, shape ...int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, data, shape...); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

var headerRe = regexp.MustCompile(`^\{'descr': '([<|][a-z][0-9])', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \}\s*$`)

// Read reads an array written by Write (or by NumPy, for the dtypes and
// C order Write uses) whose element type is T, and returns it with its
// shape.
func Read[T Number](r io.Reader) ([]T, []int, error) {
	var pre [10]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, nil, fmt.Errorf("npy: read header: %w", err)
	}
	if !bytes.Equal(pre[:6], magic) || pre[6] != 1 {
		return nil, nil, errors.New("npy: not a version 1 .npy file")
	}
	hl := binary.LittleEndian.Uint16(pre[8:])
	header := make([]byte, hl)
	if _, err := io.ReadFull(r, header); err != nil {
		return nil, nil, fmt.Errorf("npy: read header: %w", err)
	}
	m := headerRe.FindSubmatch(header)
	if m == nil {
		return nil, nil, fmt.Errorf("npy: unsupported header %q", header)
	}
	if got, want := string(m[1]), descr[T](); got != want {
		return nil, nil, fmt.Errorf("npy: dtype %s, want %s", got, want)
	}
	var shape []int
	n := 1
	for _, f := range strings.Split(string(m[2]), ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, nil, fmt.Errorf("npy: bad shape %q", m[2])
		}
		shape = append(shape, d)
		n *= d
	}
	data := make([]T, n)
	if err := binary.Read(r, binary.LittleEndian, data); err != nil {
		return nil, nil, fmt.Errorf("npy: read data: %w", err)
	}
	return data, shape, nil
}
