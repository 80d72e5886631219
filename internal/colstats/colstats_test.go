package colstats

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestAccumulator(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	r := rand.New(rand.NewPCG(1, 2))
	b := array.NewFloat64Builder(mem)
	const n = 100_000
	for i := range n {
		if i%10 == 0 {
			b.AppendNull()
			continue
		}
		b.Append(float64(r.IntN(1000)))
	}
	arr := b.NewArray()
	b.Release()
	defer arr.Release()

	acc := NewAccumulator("x", arr.DataType())
	if err := acc.Add(arr); err != nil {
		t.Fatal(err)
	}
	c := acc.Result()
	if c.Rows != n || c.Nulls != n/10 || math.Abs(c.NullRate-0.1) > 1e-9 {
		t.Errorf("counts %+v", c)
	}
	if math.Abs(*c.Mean-499.5) > 5 || math.Abs(*c.Std-288.7) > 5 || *c.Min != 0 || *c.Max != 999 {
		t.Errorf("moments mean %v std %v min %v max %v", *c.Mean, *c.Std, *c.Min, *c.Max)
	}
	if math.Abs(*c.P50-500) > 30 || math.Abs(*c.P99-990) > 15 {
		t.Errorf("quantiles p50 %v p99 %v", *c.P50, *c.P99)
	}
	if math.Abs(float64(c.Distinct)-1000) > 50 {
		t.Errorf("distinct %d, want about 1000", c.Distinct)
	}
	var total int64
	for _, bin := range c.Histogram {
		total += bin.Count
	}
	if len(c.Histogram) != Bins || math.Abs(float64(total-c.Count)) > Bins {
		t.Errorf("histogram %d bins, %d values of %d", len(c.Histogram), total, c.Count)
	}

	rep := Report{Table: "t", Rows: n, Columns: []Column{c}}
	limit := 0.05
	v := rep.Violations(Thresholds{MaxNullRate: &limit})
	if len(v) != 1 || !strings.Contains(v[0], "column x: null rate 0.1000 exceeds max_null_rate 0.0500") {
		t.Errorf("violations %v", v)
	}
	html, err := rep.HTML()
	if err != nil || !strings.Contains(string(html), "<svg") || !strings.Contains(string(html), "<td>x") {
		t.Errorf("html: %v\n%s", err, html)
	}
}

func TestListsAndConstants(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	lb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int64)
	vb := lb.ValueBuilder().(*array.Int64Builder)
	for i := range 50 {
		lb.Append(true)
		for j := range i % 3 {
			vb.Append(int64(j))
		}
	}
	lb.AppendNull()
	list := lb.NewArray()
	lb.Release()
	defer list.Release()
	acc := NewAccumulator("l", list.DataType())
	acc.Add(list)
	c := acc.Result()
	if c.Of != "length" || *c.Max != 2 || c.Nulls != 1 || c.Distinct != 3 {
		t.Errorf("list profile %+v", c)
	}

	fb := array.NewFloat64Builder(mem)
	for range 100 {
		fb.Append(1)
	}
	cons := fb.NewArray()
	fb.Release()
	defer cons.Release()
	acc = NewAccumulator("c", cons.DataType())
	acc.Add(cons)
	c = acc.Result()
	minStd := 1e-9
	if v := (Report{Columns: []Column{c}}).Violations(Thresholds{MinStd: &minStd}); len(v) != 1 {
		t.Errorf("a constant column passed min_std: %+v", c)
	}
}
