package backfill

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkJoinKernels compares the join kernels alone, in memory, on
// RETRAIN_BENCH_ROWS rows (default 10,000,000) split into 480 partitions
// (30 days x 16 buckets) with five float feature columns: one global hash
// join over every row, a hash join per partition (bucketed), and the zip
// per partition that promotion uses when staged rows line up with the
// training rows.
func BenchmarkJoinKernels(b *testing.B) {
	n := 10_000_000
	if v, err := strconv.Atoi(os.Getenv("RETRAIN_BENCH_ROWS")); err == nil && v > 0 {
		n = v
	}
	const parts, nfeat = 480, 5
	mem := memory.NewGoAllocator()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 1))
	kb := array.NewInt64Builder(mem)
	for i := range n {
		kb.Append(int64(i)*7 + 3)
	}
	keys := kb.NewArray()
	var feats []arrow.Array
	for range nfeat {
		fb := array.NewFloat64Builder(mem)
		for range n {
			fb.Append(r.Float64())
		}
		feats = append(feats, fb.NewArray())
	}
	per := n / parts
	bounds := func(p int) (int64, int64) {
		lo := int64(p * per)
		if p == parts-1 {
			return lo, int64(n)
		}
		return lo, lo + int64(per)
	}
	sink := 0
	b.Run("global_hash", func(b *testing.B) {
		for range b.N {
			ix, err := NewKeyIndex([]string{"k"}, []arrow.Array{keys})
			if err != nil {
				b.Fatal(err)
			}
			idx, _ := ix.Lookup([]arrow.Array{keys})
			out, err := Take(ctx, mem, feats, idx)
			if err != nil {
				b.Fatal(err)
			}
			sink += out[0].Len()
			for _, o := range out {
				o.Release()
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/row")
	})
	b.Run("bucketed_hash", func(b *testing.B) {
		for range b.N {
			for p := range parts {
				lo, hi := bounds(p)
				k := array.NewSlice(keys, lo, hi)
				ix, _ := NewKeyIndex([]string{"k"}, []arrow.Array{k})
				idx, _ := ix.Lookup([]arrow.Array{k})
				var cols []arrow.Array
				for _, f := range feats {
					cols = append(cols, array.NewSlice(f, lo, hi))
				}
				out, err := Take(ctx, mem, cols, idx)
				if err != nil {
					b.Fatal(err)
				}
				sink += out[0].Len()
				for _, o := range append(out, append(cols, k)...) {
					o.Release()
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/row")
	})
	b.Run("bucketed_zip", func(b *testing.B) {
		for range b.N {
			for p := range parts {
				lo, hi := bounds(p)
				if !array.SliceEqual(keys, lo, hi, keys, lo, hi) {
					b.Fatal("keys differ")
				}
				for _, f := range feats {
					s := array.NewSlice(f, lo, hi)
					sink += s.Len()
					s.Release()
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/row")
	})
	_ = sink
}
