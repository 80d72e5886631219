package backfill

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Plain rows for the reference join.
type trainRow struct {
	user  int64
	day   Day
	event int64 // microseconds
}

type featRow struct {
	user  int64
	day   Day
	ts    int64 // microseconds: when the row became known
	value float64
}

// referenceJoin is the definition of each alignment, written as plainly as
// possible: a nested loop over every feature row. It returns the index of
// the joined feature row, or -1.
func referenceJoin(align Alignment, t trainRow, feats []featRow) int {
	best := -1
	for j, f := range feats {
		if f.user != t.user {
			continue
		}
		switch align {
		case SameDay:
			if f.day == t.day {
				best = j
			}
		case PreviousDay:
			if f.day == t.day-1 {
				best = j
			}
		case AsOf:
			if f.ts <= t.event && (best < 0 || f.ts > feats[best].ts) {
				best = j
			}
		}
	}
	return best
}

func int64s(mem memory.Allocator, vals []int64) arrow.Array {
	b := array.NewInt64Builder(mem)
	defer b.Release()
	b.AppendValues(vals, nil)
	return b.NewArray()
}

func dates(mem memory.Allocator, vals []Day) arrow.Array {
	b := array.NewDate32Builder(mem)
	defer b.Release()
	for _, v := range vals {
		b.Append(arrow.Date32(v))
	}
	return b.NewArray()
}

func stamps(mem memory.Allocator, vals []int64) arrow.Array {
	b := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"})
	defer b.Release()
	for _, v := range vals {
		b.Append(arrow.Timestamp(v))
	}
	return b.NewArray()
}

// gen makes training rows and feature rows whose timestamps scatter around
// the training events: some a day before, some the same day, some after
// the event (the leak an as_of join must never take), and some exactly at
// an event time (which it may). Feature rows are unique per (user, day) and
// per (user, ts), as NewFeatureIndex requires.
func gen(r *rand.Rand, nTrain, users, days int) ([]trainRow, []featRow) {
	const d0 = Day(20400)
	var train []trainRow
	for range nTrain {
		d := d0 + Day(r.IntN(days))
		train = append(train, trainRow{user: int64(r.IntN(users)), day: d, event: d.Micros() + r.Int64N(MicrosPerDay)})
	}
	var feats []featRow
	usedTS := map[[2]int64]bool{}
	for u := range users {
		for d := d0 - 2; d < d0+Day(days)+1; d++ {
			if r.IntN(4) == 0 {
				continue // gaps: some entities have no row some days
			}
			var ts int64
			switch r.IntN(4) {
			case 0: // published at the end of the day (a daily aggregate)
				ts = (d + 1).Micros()
			case 1: // anywhere in the day, possibly after an event of the day
				ts = d.Micros() + r.Int64N(MicrosPerDay)
			case 2: // exactly at some training event of this user, if any
				ts = d.Micros() + r.Int64N(MicrosPerDay)
				for _, t := range train {
					if t.user == int64(u) && t.day == d {
						ts = t.event
						break
					}
				}
			default: // late: published days afterwards
				ts = (d + Day(1+r.IntN(3))).Micros() + r.Int64N(MicrosPerDay)
			}
			if usedTS[[2]int64{int64(u), ts}] {
				continue
			}
			usedTS[[2]int64{int64(u), ts}] = true
			feats = append(feats, featRow{user: int64(u), day: d, ts: ts, value: r.Float64()})
		}
	}
	return train, feats
}

func columns(mem memory.Allocator, train []trainRow, feats []featRow) (tUser, tDay, tEvent, fUser, fDay, fTS arrow.Array) {
	var tu, te, fu, ft []int64
	var td, fd []Day
	for _, t := range train {
		tu, td, te = append(tu, t.user), append(td, t.day), append(te, t.event)
	}
	for _, f := range feats {
		fu, fd, ft = append(fu, f.user), append(fd, f.day), append(ft, f.ts)
	}
	return int64s(mem, tu), dates(mem, td), stamps(mem, te), int64s(mem, fu), dates(mem, fd), stamps(mem, ft)
}

// TestMatchEqualsReference compares the indexed join with the nested-loop
// reference for every alignment, on random data with gaps and late rows.
func TestMatchEqualsReference(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	for seed := range uint64(5) {
		r := rand.New(rand.NewPCG(seed, 7))
		train, feats := gen(r, 400, 15, 6)
		tUser, tDay, tEvent, fUser, fDay, fTS := columns(mem, train, feats)
		for _, align := range Alignments {
			fTime, tTime := fDay, tDay
			if align == AsOf {
				fTime, tTime = fTS, tEvent
			}
			ix, err := NewFeatureIndex(align, []string{"user_id"}, []arrow.Array{fUser}, fTime)
			if err != nil {
				t.Fatalf("seed %d %s: index: %v", seed, align, err)
			}
			got, err := ix.Match([]arrow.Array{tUser}, tTime)
			if err != nil {
				t.Fatalf("seed %d %s: match: %v", seed, align, err)
			}
			matched := 0
			for i, tr := range train {
				want := referenceJoin(align, tr, feats)
				if int(got[i]) != want {
					t.Fatalf("seed %d %s: training row %d (user %d, %s, event %d): joined feature row %d, reference %d",
						seed, align, i, tr.user, tr.day, tr.event, got[i], want)
				}
				if want >= 0 {
					matched++
				}
			}
			if matched == 0 || (align.UsesDate() && matched == len(train)) {
				t.Errorf("seed %d %s: %d of %d matched: the data does not exercise the join", seed, align, matched, len(train))
			}
		}
		for _, a := range []arrow.Array{tUser, tDay, tEvent, fUser, fDay, fTS} {
			a.Release()
		}
	}
}

// TestAsOfNeverJoinsTheFuture is the adversarial leak test: for every
// training event there are feature rows stamped one microsecond after it,
// exactly at it, and far in the future, and rows that an entity has only
// in the future. No joined feature row may be stamped after its event;
// a row stamped exactly at the event is visible.
func TestAsOfNeverJoinsTheFuture(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	r := rand.New(rand.NewPCG(42, 42))
	const users = 50
	var train []trainRow
	var feats []featRow
	seen := map[[2]int64]bool{}
	addFeat := func(u, ts int64) {
		if seen[[2]int64{u, ts}] {
			return
		}
		seen[[2]int64{u, ts}] = true
		feats = append(feats, featRow{user: u, day: Day(ts / MicrosPerDay), ts: ts, value: float64(ts)})
	}
	for range 2000 {
		u := int64(r.IntN(users))
		ev := Day(20400).Micros() + r.Int64N(5*MicrosPerDay)
		train = append(train, trainRow{user: u, day: Day(ev / MicrosPerDay), event: ev})
		addFeat(u, ev+1)                        // one microsecond too late
		addFeat(u, ev+r.Int64N(MicrosPerDay)+2) // later the same day or the next
		addFeat(u, ev+30*MicrosPerDay)          // far future
		if r.IntN(3) == 0 {
			addFeat(u, ev) // exactly at the event: allowed
		}
	}
	// Users 1000.. exist only in the future.
	for u := int64(1000); u < 1010; u++ {
		ev := Day(20401).Micros()
		train = append(train, trainRow{user: u, day: 20401, event: ev})
		addFeat(u, ev+1)
	}
	tUser, tDay, tEvent, fUser, fDay, fTS := columns(mem, train, feats)
	defer func() {
		for _, a := range []arrow.Array{tUser, tDay, tEvent, fUser, fDay, fTS} {
			a.Release()
		}
	}()
	ix, err := NewFeatureIndex(AsOf, []string{"user_id"}, []arrow.Array{fUser}, fTS)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ix.Match([]arrow.Array{tUser}, tEvent)
	if err != nil {
		t.Fatal(err)
	}
	exact := 0
	for i, tr := range train {
		if got[i] < 0 {
			continue
		}
		f := feats[got[i]]
		if f.ts > tr.event {
			t.Fatalf("training row %d (user %d, event %d) joined feature row stamped %d: %dus in its future", i, tr.user, tr.event, f.ts, f.ts-tr.event)
		}
		if f.user != tr.user {
			t.Fatalf("training row %d joined another user's row", i)
		}
		if want := referenceJoin(AsOf, tr, feats); int(got[i]) != want {
			t.Fatalf("training row %d: joined %d, reference %d", i, got[i], want)
		}
		if f.ts == tr.event {
			exact++
		}
	}
	if exact == 0 {
		t.Error("no row stamped exactly at its event was joined: the boundary is not exercised")
	}
	for i := len(train) - 10; i < len(train); i++ {
		if got[i] >= 0 {
			t.Errorf("user %d has only future rows but joined row %d", train[i].user, got[i])
		}
	}
}

func TestFeatureIndexRefusesDuplicates(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	users := int64s(mem, []int64{1, 2, 1})
	days := dates(mem, []Day{20400, 20400, 20400})
	defer users.Release()
	defer days.Release()
	_, err := NewFeatureIndex(SameDay, []string{"user_id"}, []arrow.Array{users}, days)
	if err == nil {
		t.Fatal("duplicate (user, date) accepted")
	}
	if want := "user_id=1"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
}

func TestKeyIndexCompositeAndNulls(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	ib := array.NewInt64Builder(mem)
	ib.AppendValues([]int64{1, 1, 2, 3}, []bool{true, true, true, false})
	ids := ib.NewArray()
	ib.Release()
	sb := array.NewStringBuilder(mem)
	sb.AppendValues([]string{"a", "b", "a", "a"}, nil)
	strs := sb.NewArray()
	sb.Release()
	defer ids.Release()
	defer strs.Release()

	ix, err := NewKeyIndex([]string{"id", "s"}, []arrow.Array{ids, strs})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Len() != 3 {
		t.Errorf("indexed %d keys, want 3 (the null key is left out)", ix.Len())
	}
	got, err := ix.Lookup([]arrow.Array{ids, strs})
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{0, 1, 2, -1}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d -> %d, want %d", i, got[i], want[i])
		}
	}
	dup := int64s(mem, []int64{4, 4})
	defer dup.Release()
	if _, err := NewKeyIndex([]string{"id"}, []arrow.Array{dup}); err == nil || !strings.Contains(err.Error(), "duplicate key id=4") {
		t.Errorf("duplicate key: %v", err)
	}
}

// TestTakeFillsNulls checks Take on a list column, with -1 giving nulls.
func TestTakeFillsNulls(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	lb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int64)
	vb := lb.ValueBuilder().(*array.Int64Builder)
	lb.Append(true)
	vb.AppendValues([]int64{1, 2}, nil)
	lb.Append(true)
	vb.AppendValues([]int64{3}, nil)
	list := lb.NewArray()
	lb.Release()
	defer list.Release()
	fb := array.NewFloat64Builder(mem)
	fb.AppendValues([]float64{0.5, 1.5}, nil)
	floats := fb.NewArray()
	fb.Release()
	defer floats.Release()

	out, err := Take(context.Background(), mem, []arrow.Array{list, floats}, []int32{1, -1, 0})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, a := range out {
			a.Release()
		}
	}()
	if got := out[0].String(); got != "[[3] (null) [1 2]]" {
		t.Errorf("list take = %s", got)
	}
	if got := out[1].String(); got != "[1.5 (null) 0.5]" {
		t.Errorf("float take = %s", got)
	}
}
