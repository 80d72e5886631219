// Package shard assigns the training rows of a split to the ranks of a
// training gang: each rank gets a disjoint share, the union over ranks is
// every row exactly once, and the assignment is a pure function of the
// split's units (its files, or row groups, with their row counts), the
// world size, the seed and the epoch, so that every host computes the same
// one without talking to the others.
//
// The units are shuffled by seed and epoch, laid end to end, and the row
// sequence is cut into world shares. A cut falls on a unit boundary when
// that keeps every share within one unit of the even share (whole units:
// no two ranks read the same unit); otherwise, as when there are fewer
// units than ranks, shares are exact row ranges (within one row of each
// other) and a unit cut in two is read by the two ranks that share it.
package shard

import (
	"errors"
	"fmt"

	"github.com/retrain-ml/retrain/internal/splitmix"
)

// Piece is a range of rows of one unit: rows [Offset, Offset+Rows) of
// unit Unit (an index into the units Assign was given).
type Piece struct {
	Unit   int   `json:"unit"`
	Offset int64 `json:"offset"`
	Rows   int64 `json:"rows"`
}

// Share is one rank's rows for an epoch, in the order the rank reads
// them.
type Share struct {
	Rank   int     `json:"rank"`
	Pieces []Piece `json:"pieces"`
	Rows   int64   `json:"rows"`
}

// Units returns the distinct units the share reads, in its order.
func (s Share) Units() []int {
	var out []int
	for _, p := range s.Pieces {
		if len(out) == 0 || out[len(out)-1] != p.Unit {
			out = append(out, p.Unit)
		}
	}
	return out
}

// Assignment is every rank's share of one epoch.
type Assignment struct {
	Epoch      int     `json:"epoch"`
	World      int     `json:"world"`
	GlobalRows int64   `json:"global_rows"`
	Whole      bool    `json:"whole"` // every share is whole units
	Shares     []Share `json:"shares"`
}

// MinRows is the smallest share: a synchronous trainer that must run the
// same number of steps on every rank plans them from it (and pads or
// weighs the rest, rather than drop rows).
func (a Assignment) MinRows() int64 {
	if len(a.Shares) == 0 {
		return 0
	}
	m := a.Shares[0].Rows
	for _, s := range a.Shares[1:] {
		m = min(m, s.Rows)
	}
	return m
}

// Errors of Assign, which callers check before anything is leased.
var (
	ErrNoRanks = errors.New("shard: the world has no ranks")
	ErrNoRows  = errors.New("shard: fewer rows than ranks")
)

// Assign is the epoch's assignment of the units' rows (rows[i] is unit i's
// row count) to world ranks. It fails, naming the counts, when there are
// fewer rows than ranks (a rank would have nothing to train on) or a unit
// has a negative count.
func Assign(rows []int64, world int, seed uint64, epoch int) (Assignment, error) {
	return assign(rows, world, seed, epoch, false)
}

// assign is Assign; with sparse, fewer rows than ranks leave the last
// ranks' shares empty instead of failing (the few rows left of an epoch).
func assign(rows []int64, world int, seed uint64, epoch int, sparse bool) (Assignment, error) {
	if world < 1 {
		return Assignment{}, fmt.Errorf("%w: world size %d", ErrNoRanks, world)
	}
	var total int64
	for i, n := range rows {
		if n < 0 {
			return Assignment{}, fmt.Errorf("shard: unit %d has %d rows", i, n)
		}
		total += n
	}
	if total < int64(world) && !sparse {
		return Assignment{}, fmt.Errorf("%w: %d rows in %d shards for %d ranks", ErrNoRows, total, len(rows), world)
	}
	order := Order(len(rows), seed, epoch)
	// starts[i] is where the i-th unit of the order begins in the epoch's
	// row sequence.
	starts := make([]int64, len(order)+1)
	for i, u := range order {
		starts[i+1] = starts[i] + rows[u]
	}
	cuts, whole := wholeCuts(starts, world)
	if !whole {
		cuts = evenCuts(total, world)
	}
	a := Assignment{Epoch: epoch, World: world, GlobalRows: total, Whole: whole, Shares: make([]Share, world)}
	i := 0 // the unit of the order where the share begins
	for r := range world {
		lo, hi := cuts[r], cuts[r+1]
		s := Share{Rank: r, Rows: hi - lo}
		for i < len(order) && starts[i+1] <= lo {
			i++
		}
		for j := i; j < len(order) && starts[j] < hi; j++ {
			from, to := max(lo, starts[j]), min(hi, starts[j+1])
			if to > from {
				s.Pieces = append(s.Pieces, Piece{Unit: order[j], Offset: from - starts[j], Rows: to - from})
			}
		}
		a.Shares[r] = s
	}
	return a, nil
}

// evenCuts cuts total rows into world ranges whose sizes differ by at
// most one row.
func evenCuts(total int64, world int) []int64 {
	cuts := make([]int64, world+1)
	for r := range world + 1 {
		cuts[r] = total * int64(r) / int64(world)
	}
	return cuts
}

// wholeCuts moves each even cut to the nearest unit boundary; it reports
// false when that leaves a share empty or further than one unit from the
// even share (a unit far larger than the rest, or fewer units than ranks).
func wholeCuts(starts []int64, world int) ([]int64, bool) {
	total := starts[len(starts)-1]
	even := evenCuts(total, world)
	cuts := make([]int64, world+1)
	cuts[world] = total
	var largest int64
	for i := 1; i < len(starts); i++ {
		largest = max(largest, starts[i]-starts[i-1])
	}
	j := 0
	for r := 1; r < world; r++ {
		target := even[r]
		for j+1 < len(starts) && starts[j+1] <= target {
			j++
		}
		c := starts[j]
		if j+1 < len(starts) && starts[j+1]-target < target-c {
			c = starts[j+1]
		}
		cuts[r] = c
	}
	for r := range world {
		// Within one unit (and a row, the even share not being whole) of
		// the even share total/world.
		n := cuts[r+1] - cuts[r]
		if n <= 0 || abs(n*int64(world)-total) > (largest+1)*int64(world) {
			return nil, false
		}
	}
	return cuts, true
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Order is the epoch's order of n units: a permutation drawn from the seed
// and the epoch only (Fisher-Yates on splitmix64), the same on every host
// and every Go version.
func Order(n int, seed uint64, epoch int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	state := splitmix.Mix64(seed ^ 0x9e3779b97f4a7c15*uint64(epoch+1))
	for i := n - 1; i > 0; i-- {
		state += 0x9e3779b97f4a7c15
		j := int(splitmix.Mix64(state) % uint64(i+1))
		order[i], order[j] = order[j], order[i]
	}
	return order
}

// Rest is what remains of an epoch once rank r of prev has trained the
// first done[r] rows of its share (in its pieces' order): the pieces not
// yet trained, as units (each a piece: Rest's result indexes them), so
// that a gang resumed mid-epoch with another world size assigns only
// these, and no row of the epoch is trained twice. done[r] beyond the
// share's rows counts as the whole share.
func Rest(prev Assignment, done []int64) ([]Piece, error) {
	if len(done) != len(prev.Shares) {
		return nil, fmt.Errorf("shard: %d ranks' progress for an assignment of %d ranks", len(done), len(prev.Shares))
	}
	var rest []Piece
	for r, s := range prev.Shares {
		skip := max(done[r], 0)
		for _, p := range s.Pieces {
			if skip >= p.Rows {
				skip -= p.Rows
				continue
			}
			rest = append(rest, Piece{Unit: p.Unit, Offset: p.Offset + skip, Rows: p.Rows - skip})
			skip = 0
		}
	}
	return rest, nil
}

// AssignRest assigns the rest of an epoch (Rest's pieces) to world ranks,
// as Assign does, and maps the result back to the original units.
func AssignRest(rest []Piece, world int, seed uint64, epoch int) (Assignment, error) {
	return assignRest(rest, world, seed, epoch, false)
}

func assignRest(rest []Piece, world int, seed uint64, epoch int, sparse bool) (Assignment, error) {
	rows := make([]int64, len(rest))
	for i, p := range rest {
		rows[i] = p.Rows
	}
	a, err := assign(rows, world, seed, epoch, sparse)
	if err != nil {
		return a, err
	}
	for r := range a.Shares {
		for k, p := range a.Shares[r].Pieces {
			src := rest[p.Unit]
			a.Shares[r].Pieces[k] = Piece{Unit: src.Unit, Offset: src.Offset + p.Offset, Rows: p.Rows}
		}
	}
	return a, nil
}
