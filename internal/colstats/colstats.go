// Package colstats profiles columns in one pass and bounded memory: counts
// and null rates, mean and standard deviation, min and max, approximate
// quantiles from a deterministic reservoir sample, approximate distinct
// counts from a HyperLogLog sketch, and a histogram; and renders the
// profile as JSON and as a self-contained HTML page.
package colstats

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/retrain-ml/retrain/internal/splitmix"
)

// SampleSize is the reservoir size behind the quantiles and histogram:
// their rank error is about 1/sqrt(SampleSize).
const SampleSize = 8192

// Bins is the number of histogram bins.
const Bins = 20

// Column is the profile of one column. Numeric figures are of the values
// (for list columns: of the list lengths); they are nil for columns
// without numbers or without values, so the JSON never holds NaN.
type Column struct {
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	Rows      int64    `json:"rows"`
	Count     int64    `json:"count"` // non-null values
	Nulls     int64    `json:"nulls"`
	NullRate  float64  `json:"null_rate"`
	Mean      *float64 `json:"mean,omitempty"`
	Std       *float64 `json:"std,omitempty"`
	Min       *float64 `json:"min,omitempty"`
	Max       *float64 `json:"max,omitempty"`
	P50       *float64 `json:"p50,omitempty"`
	P99       *float64 `json:"p99,omitempty"`
	Distinct  int64    `json:"approx_distinct"`
	Histogram []Bin    `json:"histogram,omitempty"`
	Of        string   `json:"of,omitempty"` // "length" for list columns
}

// Bin is a histogram bin [Lo, Hi) (the last one includes Hi), with an
// estimated count.
type Bin struct {
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Count int64   `json:"count"`
}

// Accumulator profiles one column, batch by batch.
type Accumulator struct {
	name, typ string
	list      bool
	rows      int64
	nulls     int64
	n         int64   // numeric values seen
	mean, m2  float64 // Welford
	min, max  float64
	sample    []float64
	rng       *rand.Rand
	hll       hll
}

// NewAccumulator starts a profile of a column. The reservoir sample is
// seeded from the column name, so a profile of the same data is the same.
func NewAccumulator(name string, typ arrow.DataType) *Accumulator {
	h := fnv.New64a()
	h.Write([]byte(name))
	_, list := typ.(arrow.ListLikeType)
	return &Accumulator{
		name: name, typ: typ.String(), list: list,
		min: math.Inf(1), max: math.Inf(-1),
		rng: rand.New(rand.NewPCG(h.Sum64(), 0x5eed)),
	}
}

// Add profiles the values of arr.
func (a *Accumulator) Add(arr arrow.Array) error {
	a.rows += int64(arr.Len())
	switch c := arr.(type) {
	case *array.Float64:
		a.each(c, func(i int) { a.float(c.Value(i)) })
	case *array.Float32:
		a.each(c, func(i int) { a.float(float64(c.Value(i))) })
	case *array.Int64:
		a.each(c, func(i int) { a.int(c.Value(i)) })
	case *array.Int32:
		a.each(c, func(i int) { a.int(int64(c.Value(i))) })
	case *array.Boolean:
		a.each(c, func(i int) {
			v := 0.0
			if c.Value(i) {
				v = 1
			}
			a.number(v)
			a.hll.add(splitmix.Mix64(uint64(v) + 1))
		})
	case *array.String:
		a.each(c, func(i int) { a.hll.add(stringHash(c.Value(i))) })
	case *array.LargeString:
		a.each(c, func(i int) { a.hll.add(stringHash(c.Value(i))) })
	case array.ListLike:
		a.each(c, func(i int) {
			start, end := c.ValueOffsets(i)
			a.number(float64(end - start))
			h := splitmix.Mix64(uint64(end-start) + 0x9e3779b97f4a7c15)
			for j := start; j < end; j++ {
				h = splitmix.Mix64(h ^ elemHash(c.ListValues(), int(j)))
			}
			a.hll.add(h)
		})
	default:
		a.each(arr, func(i int) { a.hll.add(stringHash(arr.ValueStr(i))) })
	}
	return nil
}

// each counts the nulls of arr and calls f with the index of every other
// value.
func (a *Accumulator) each(arr arrow.Array, f func(i int)) {
	for i := range arr.Len() {
		if arr.IsNull(i) {
			a.nulls++
			continue
		}
		f(i)
	}
}

func (a *Accumulator) float(v float64) {
	a.number(v)
	a.hll.add(floatHash(v))
}

func (a *Accumulator) int(v int64) {
	a.number(float64(v))
	a.hll.add(splitmix.Mix64(uint64(v)))
}

func (a *Accumulator) number(v float64) {
	if math.IsNaN(v) {
		return
	}
	a.n++
	d := v - a.mean
	a.mean += d / float64(a.n)
	a.m2 += d * (v - a.mean)
	a.min = math.Min(a.min, v)
	a.max = math.Max(a.max, v)
	// Reservoir sampling (algorithm R).
	if len(a.sample) < SampleSize {
		a.sample = append(a.sample, v)
	} else if j := a.rng.Int64N(a.n); j < SampleSize {
		a.sample[j] = v
	}
}

// Result is the profile so far.
func (a *Accumulator) Result() Column {
	c := Column{Name: a.name, Type: a.typ, Rows: a.rows, Nulls: a.nulls, Count: a.rows - a.nulls, Distinct: a.hll.estimate()}
	if a.rows > 0 {
		c.NullRate = float64(a.nulls) / float64(a.rows)
	}
	if a.list {
		c.Of = "length"
	}
	if a.n == 0 {
		return c
	}
	f := func(v float64) *float64 { return &v }
	c.Mean, c.Min, c.Max = f(a.mean), f(a.min), f(a.max)
	std := 0.0
	if a.n > 1 {
		std = math.Sqrt(a.m2 / float64(a.n-1))
	}
	c.Std = f(std)
	s := slices.Clone(a.sample)
	slices.Sort(s)
	c.P50, c.P99 = f(quantile(s, 0.5)), f(quantile(s, 0.99))
	c.Histogram = histogram(s, a.min, a.max, a.n)
	return c
}

// quantile of a sorted sample, by linear interpolation.
func quantile(s []float64, q float64) float64 {
	if len(s) == 1 {
		return s[0]
	}
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// histogram bins the sample between the exact min and max and scales the
// counts to the number of values.
func histogram(s []float64, lo, hi float64, n int64) []Bin {
	if hi == lo {
		return []Bin{{Lo: lo, Hi: hi, Count: n}}
	}
	width := (hi - lo) / Bins
	counts := make([]int64, Bins)
	for _, v := range s {
		b := min(int((v-lo)/width), Bins-1)
		counts[max(b, 0)]++
	}
	out := make([]Bin, Bins)
	for i := range out {
		out[i] = Bin{Lo: lo + float64(i)*width, Hi: lo + float64(i+1)*width,
			Count: int64(math.Round(float64(counts[i]) * float64(n) / float64(len(s))))}
	}
	return out
}

// hll is a HyperLogLog sketch with 2^12 registers (about 1.6% error).
type hll struct {
	regs []uint8
}

const hllBits = 12

func (h *hll) add(x uint64) {
	if h.regs == nil {
		h.regs = make([]uint8, 1<<hllBits)
	}
	idx := x >> (64 - hllBits)
	rank := uint8(bits.LeadingZeros64(x<<hllBits|1<<(hllBits-1)) + 1)
	if rank > h.regs[idx] {
		h.regs[idx] = rank
	}
}

func (h *hll) estimate() int64 {
	if h.regs == nil {
		return 0
	}
	m := float64(len(h.regs))
	sum, zeros := 0.0, 0
	for _, r := range h.regs {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	est := 0.7213 / (1 + 1.079/m) * m * m / sum
	if est <= 2.5*m && zeros > 0 {
		est = m * math.Log(m/float64(zeros)) // linear counting for small sets
	}
	return int64(math.Round(est))
}

func elemHash(vals arrow.Array, j int) uint64 {
	if vals.IsNull(j) {
		return 0x6a09e667f3bcc908
	}
	switch v := vals.(type) {
	case *array.Int64:
		return splitmix.Mix64(uint64(v.Value(j)))
	case *array.Int32:
		return splitmix.Mix64(uint64(v.Value(j)))
	case *array.Float64:
		return floatHash(v.Value(j))
	case *array.String:
		return stringHash(v.Value(j))
	default:
		return stringHash(vals.ValueStr(j))
	}
}

func floatHash(v float64) uint64 {
	if v == 0 {
		v = 0 // -0 and 0 are one value
	}
	return splitmix.Mix64(math.Float64bits(v))
}

func stringHash(s string) uint64 {
	h := fnv.New64a()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
	return splitmix.Mix64(h.Sum64())
}
