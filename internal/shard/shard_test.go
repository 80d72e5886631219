package shard

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// covered checks that a's shares cover every row of the units exactly
// once (rows[i] rows of unit i), and returns the largest and smallest
// share.
func covered(t *testing.T, rows []int64, a Assignment) (lo, hi int64) {
	t.Helper()
	seen := make([][]int, len(rows)) // per unit, how often each row was given
	for i, n := range rows {
		seen[i] = make([]int, n)
	}
	lo = -1
	for r, s := range a.Shares {
		if s.Rank != r {
			t.Fatalf("share %d says rank %d", r, s.Rank)
		}
		var sum int64
		for _, p := range s.Pieces {
			if p.Rows <= 0 || p.Offset < 0 || p.Offset+p.Rows > rows[p.Unit] {
				t.Fatalf("rank %d: piece %+v outside unit %d's %d rows", r, p, p.Unit, rows[p.Unit])
			}
			for k := p.Offset; k < p.Offset+p.Rows; k++ {
				seen[p.Unit][k]++
			}
			sum += p.Rows
		}
		if sum != s.Rows {
			t.Fatalf("rank %d: pieces hold %d rows, share says %d", r, sum, s.Rows)
		}
		hi = max(hi, s.Rows)
		if lo < 0 || s.Rows < lo {
			lo = s.Rows
		}
	}
	var total int64
	for u, rs := range seen {
		for k, n := range rs {
			if n != 1 {
				t.Fatalf("unit %d row %d given %d times", u, k, n)
			}
		}
		total += rows[u]
	}
	if a.GlobalRows != total {
		t.Fatalf("global rows %d, want %d", a.GlobalRows, total)
	}
	return lo, hi
}

// TestAssignProperties: for random units and world sizes, every row is
// given once, shares are balanced (within one unit when whole, one row
// otherwise), and the same inputs give the same assignment.
func TestAssignProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		n := rng.IntN(40)
		rows := make([]int64, n)
		var largest, total int64
		for i := range rows {
			rows[i] = rng.Int64N(200)
			if rng.IntN(10) == 0 {
				rows[i] = 0 // empty files happen: an empty split part
			}
			largest, total = max(largest, rows[i]), total+rows[i]
		}
		world := 1 + rng.IntN(16)
		seed, epoch := rng.Uint64(), rng.IntN(5)
		a, err := Assign(rows, world, seed, epoch)
		if total < int64(world) {
			if !errors.Is(err, ErrNoRows) {
				t.Fatalf("trial %d: %d rows for %d ranks: error %v", trial, total, world, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		lo, hi := covered(t, rows, a)
		if lo < 1 {
			t.Fatalf("trial %d: a rank has no rows: %+v", trial, a)
		}
		if a.Whole {
			for _, s := range a.Shares {
				if d := s.Rows*int64(world) - total; d > (largest+1)*int64(world) || -d > (largest+1)*int64(world) {
					t.Fatalf("trial %d: whole share of %d rows, even share %d/%d, largest unit %d", trial, s.Rows, total, world, largest)
				}
			}
			for _, s := range a.Shares {
				for _, p := range s.Pieces {
					if p.Offset != 0 || p.Rows != rows[p.Unit] {
						t.Fatalf("trial %d: whole assignment cuts unit %d: %+v", trial, p.Unit, p)
					}
				}
			}
		} else if hi-lo > 1 {
			t.Fatalf("trial %d: row-range shares %d..%d rows", trial, lo, hi)
		}
		again, _ := Assign(slices.Clone(rows), world, seed, epoch)
		if !reflect.DeepEqual(a, again) {
			t.Fatalf("trial %d: not deterministic", trial)
		}
	}
}

// TestAssignWholeWithinOneUnit: equal units as a split writes them
// (max_file_rows) are given whole, each rank within one unit of another.
func TestAssignWholeWithinOneUnit(t *testing.T) {
	rows := slices.Repeat([]int64{100}, 20)
	rows[19] = 37 // the last file is short
	for _, world := range []int{1, 2, 3, 4, 7, 20} {
		a, err := Assign(rows, world, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := covered(t, rows, a)
		even := float64(1937) / float64(world)
		if !a.Whole || float64(hi)-even > 101 || even-float64(lo) > 101 {
			t.Errorf("world %d: whole %v, shares %d..%d rows, even %.1f", world, a.Whole, lo, hi, even)
		}
	}
}

// TestAssignFewerUnitsThanRanks: three files for eight ranks still train,
// as row ranges within one row of each other.
func TestAssignFewerUnitsThanRanks(t *testing.T) {
	rows := []int64{1000, 10, 500}
	a, err := Assign(rows, 8, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := covered(t, rows, a)
	if a.Whole || hi-lo > 1 {
		t.Fatalf("whole %v, shares %d..%d", a.Whole, lo, hi)
	}
	if _, err := Assign([]int64{2, 1}, 4, 1, 0); !errors.Is(err, ErrNoRows) || err.Error() != "shard: fewer rows than ranks: 3 rows in 2 shards for 4 ranks" {
		t.Fatalf("3 rows for 4 ranks: %v", err)
	}
	if _, err := Assign(nil, 0, 1, 0); !errors.Is(err, ErrNoRanks) {
		t.Fatalf("no ranks: %v", err)
	}
}

// TestEpochsReshuffle: another epoch gives another order of the units,
// and so other shares; the same epoch gives the same.
func TestEpochsReshuffle(t *testing.T) {
	rows := slices.Repeat([]int64{10}, 50)
	e0, _ := Assign(rows, 4, 7, 0)
	e1, _ := Assign(rows, 4, 7, 1)
	s2, _ := Assign(rows, 4, 8, 0)
	if reflect.DeepEqual(e0.Shares, e1.Shares) || reflect.DeepEqual(e0.Shares, s2.Shares) {
		t.Fatal("epoch 1 or seed 8 gives epoch 0's shares")
	}
	if got := Order(10, 7, 3); !reflect.DeepEqual(got, Order(10, 7, 3)) {
		t.Fatal("order not deterministic")
	}
	// Pinned: the order is computed on each host, by whatever binary the
	// host runs; it must never change.
	if got, want := Order(8, 1, 0), []int{2, 1, 3, 6, 4, 0, 5, 7}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Order(8, 1, 0) = %v, want %v", got, want)
	}
}

// TestResumeWithAnotherWorld: a gang of 3 ranks trains part of an epoch,
// and a gang of 5 resumes it: the rows of the rest are the epoch's rows
// not yet trained, each once, balanced over the new ranks.
func TestResumeWithAnotherWorld(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 500 {
		rows := make([]int64, 1+rng.IntN(30))
		for i := range rows {
			rows[i] = 1 + rng.Int64N(100)
		}
		first, err := Assign(rows, 1+rng.IntN(6), 11, 2)
		if err != nil {
			continue // fewer rows than ranks
		}
		done := make([]int64, first.World)
		trained := make([][]bool, len(rows))
		for i, n := range rows {
			trained[i] = make([]bool, n)
		}
		step := rng.Int64N(first.MinRows() + 1) // every rank trained step rows
		for r, s := range first.Shares {
			done[r] = step
			left := step
			for _, p := range s.Pieces {
				for k := p.Offset; k < p.Offset+p.Rows && left > 0; k++ {
					trained[p.Unit][k] = true
					left--
				}
			}
		}
		rest, err := Rest(first, done)
		if err != nil {
			t.Fatal(err)
		}
		var left int64
		for _, p := range rest {
			left += p.Rows
		}
		world := 1 + rng.IntN(6)
		a, err := AssignRest(rest, world, 11, 2)
		if left < int64(world) {
			if err == nil {
				t.Fatalf("trial %d: %d rows left for %d ranks: no error", trial, left, world)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range a.Shares {
			for _, p := range s.Pieces {
				for k := p.Offset; k < p.Offset+p.Rows; k++ {
					if trained[p.Unit][k] {
						t.Fatalf("trial %d: unit %d row %d trained twice in the epoch", trial, p.Unit, k)
					}
					trained[p.Unit][k] = true
				}
			}
		}
		for u := range trained {
			for k, ok := range trained[u] {
				if !ok {
					t.Fatalf("trial %d: unit %d row %d never trained in the epoch", trial, u, k)
				}
			}
		}
		if a.GlobalRows != left {
			t.Fatalf("trial %d: global rows %d, rest %d", trial, a.GlobalRows, left)
		}
	}
	if _, err := Rest(Assignment{Shares: make([]Share, 2)}, []int64{1}); err == nil {
		t.Fatal("progress of 1 rank for 2: no error")
	}
}
