package trainer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
)

// encoder writes the little-endian binary model and checkpoint formats,
// keeping the first error and a CRC-32 of each section, so that the format
// code reads as a list of fields.
type encoder struct {
	w   *bufio.Writer
	crc hash.Hash32
	buf []byte
	n   int64
	err error
}

func newEncoder(w io.Writer) *encoder {
	return &encoder{w: bufio.NewWriterSize(w, 1<<16), crc: crc32.NewIEEE(), buf: make([]byte, 0, 1<<15)}
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	e.crc.Write(b)
	n, err := e.w.Write(b)
	e.n += int64(n)
	e.err = err
}

func (e *encoder) u32(v uint32) { e.bytes(binary.LittleEndian.AppendUint32(e.buf[:0], v)) }
func (e *encoder) u64(v uint64) { e.bytes(binary.LittleEndian.AppendUint64(e.buf[:0], v)) }
func (e *encoder) i64(v int64)  { e.u64(uint64(v)) }

func (e *encoder) strs(ss []string) {
	e.u32(uint32(len(ss)))
	for _, s := range ss {
		e.u32(uint32(len(s)))
		e.bytes([]byte(s))
	}
}

func (e *encoder) f32s(v []float32) {
	for len(v) > 0 && e.err == nil {
		k := min(len(v), cap(e.buf)/4)
		b := e.buf[:0]
		for _, x := range v[:k] {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		e.bytes(b)
		v = v[k:]
	}
}

// checksum ends a section with the CRC-32 of its bytes.
func (e *encoder) checksum() {
	sum := e.crc.Sum32()
	e.bytes(binary.LittleEndian.AppendUint32(e.buf[:0], sum))
	e.crc.Reset()
}

func (e *encoder) flush() error {
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return e.err
}

// decoder reads what encoder wrote, keeping the first error.
type decoder struct {
	r   io.Reader
	crc hash.Hash32
	buf []byte
	err error
}

func newDecoder(r io.Reader) *decoder {
	return &decoder{r: bufio.NewReaderSize(r, 1<<16), crc: crc32.NewIEEE(), buf: make([]byte, 1<<15)}
}

// maxString bounds a feature name, so that a corrupt length cannot make the
// decoder allocate gigabytes.
const maxString = 1 << 16

func (d *decoder) fill(b []byte) {
	if d.err != nil {
		clear(b)
		return
	}
	if _, err := io.ReadFull(d.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.err = err
		clear(b)
		return
	}
	d.crc.Write(b)
}

func (d *decoder) bytes(n int) []byte {
	b := make([]byte, n)
	d.fill(b)
	return b
}

func (d *decoder) u32() uint32 {
	d.fill(d.buf[:4])
	return binary.LittleEndian.Uint32(d.buf)
}

func (d *decoder) u64() uint64 {
	d.fill(d.buf[:8])
	return binary.LittleEndian.Uint64(d.buf)
}

func (d *decoder) i64() int64 { return int64(d.u64()) }

func (d *decoder) strs() []string {
	n := d.u32()
	if n > maxString && d.err == nil {
		d.err = fmt.Errorf("%d names: corrupt", n)
	}
	if d.err != nil {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		k := d.u32()
		if k > maxString && d.err == nil {
			d.err = fmt.Errorf("name of %d bytes: corrupt", k)
		}
		if d.err != nil {
			return nil
		}
		ss[i] = string(d.bytes(int(k)))
	}
	return ss
}

func (d *decoder) f32s(v []float32) {
	for len(v) > 0 && d.err == nil {
		k := min(len(v), len(d.buf)/4)
		b := d.buf[:4*k]
		d.fill(b)
		for i := range v[:k] {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		v = v[k:]
	}
}

// checksum reads a section's CRC-32 and checks it.
func (d *decoder) checksum() {
	want := d.crc.Sum32()
	got := d.u32()
	if d.err == nil && got != want {
		d.err = errors.New("checksum mismatch: corrupt or truncated")
	}
	d.crc.Reset()
}
