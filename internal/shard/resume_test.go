package shard

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestResumeChain: an epoch interrupted several times, each time resumed
// by a gang of another (or the same) world size at a position At
// recorded, trains every row of the epoch once in total; and a gang of
// the size of the last stage goes on where that stage was.
func TestResumeChain(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const seed, epoch = 3, 4
	for trial := range 300 {
		rows := make([]int64, 1+rng.IntN(25))
		var total int64
		for i := range rows {
			rows[i] = 1 + rng.Int64N(80)
			total += rows[i]
		}
		trained := make([][]bool, len(rows))
		for i, n := range rows {
			trained[i] = make([]bool, n)
		}
		var pos *Position
		stages := 1 + rng.IntN(4)
		for k := range stages + 1 {
			world := 1 + rng.IntN(6)
			if int64(world) > total {
				world = int(total)
			}
			res, err := Resume(rows, world, seed, pos)
			if err != nil {
				t.Fatalf("trial %d stage %d: %v", trial, k, err)
			}
			covered(t, rows, res.Full)
			cur := res.Full
			if pos != nil && (res.Rest != nil || len(pos.Stages) > 1 || pos.Stages[0].World != world) {
				if res.Rest == nil {
					// The epoch was over: nothing of it is left.
					for u := range trained {
						for r, ok := range trained[u] {
							if !ok {
								t.Fatalf("trial %d stage %d: no rest, but unit %d row %d untrained", trial, k, u, r)
							}
						}
					}
					break
				}
				cur = *res.Rest
			}
			// A gang of the same size as the last stage trains on from
			// its position there; another starts at the rest's start.
			from := make([]int64, world)
			if pos != nil && pos.Stages[len(pos.Stages)-1].World == world {
				copy(from, pos.Stages[len(pos.Stages)-1].Done)
				if res.Rest != nil && !reflect.DeepEqual(res.RestDone, pos.Stages[len(pos.Stages)-1].Done) {
					t.Fatalf("trial %d: rest done %v, want the last stage's %v", trial, res.RestDone, pos.Stages[len(pos.Stages)-1].Done)
				}
			}
			done := make([]int64, world)
			for r, s := range cur.Shares {
				done[r] = from[r]
				if k < stages && s.Rows > from[r] {
					done[r] += rng.Int64N(s.Rows - from[r] + 1) // interrupted here
				} else if k == stages {
					done[r] = s.Rows // the last gang ends the epoch
				}
			}
			trainFrom(t, trained, cur, from, done)
			p := res.At(epoch, done)
			pos = &p
		}
		for u := range trained {
			for r, ok := range trained[u] {
				if !ok {
					t.Fatalf("trial %d: unit %d row %d never trained in the epoch", trial, u, r)
				}
			}
		}
	}
}

// trainFrom marks rows from[r] to done[r] of each rank's share trained.
func trainFrom(t *testing.T, trained [][]bool, a Assignment, from, done []int64) {
	t.Helper()
	for r, s := range a.Shares {
		var at int64
		for _, p := range s.Pieces {
			for k := p.Offset; k < p.Offset+p.Rows; k++ {
				if at >= from[r] && at < done[r] {
					if trained[p.Unit][k] {
						t.Fatalf("unit %d row %d trained twice in the epoch", p.Unit, k)
					}
					trained[p.Unit][k] = true
				}
				at++
			}
		}
	}
}

// TestResumeSameWorld: a gang of the size that wrote the checkpoint in
// the epoch's own shares keeps them and gets no rest.
func TestResumeSameWorld(t *testing.T) {
	rows := []int64{10, 20, 30, 40}
	res, err := Resume(rows, 2, 1, &Position{Epoch: 3, Stages: []Stage{{World: 2, Done: []int64{5, 7}}}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Assign(rows, 2, 1, 0)
	if res.Rest != nil || !reflect.DeepEqual(res.Full, want) {
		t.Fatalf("resumed %+v: want the same shares and no rest", res)
	}
	// At a position with another world: the rest is the epoch's 100 rows
	// less the 12 trained.
	res, err = Resume(rows, 3, 1, &Position{Epoch: 3, Stages: []Stage{{World: 2, Done: []int64{5, 7}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rest == nil || res.Rest.GlobalRows != 88 || res.Rest.World != 3 || res.Epoch != 3 || res.RestDone != nil {
		t.Fatalf("resumed %+v: want a rest of 88 rows for 3 ranks", res)
	}
	// Trained to the end by the old world: no rest.
	a, _ := Assign(rows, 2, 1, 0)
	res, err = Resume(rows, 3, 1, &Position{Epoch: 3, Stages: []Stage{{World: 2, Done: []int64{a.Shares[0].Rows, a.Shares[1].Rows}}}})
	if err != nil || res.Rest != nil {
		t.Fatalf("resumed %+v, %v: want no rest", res, err)
	}
	// Two rows left for three ranks: the third's rest share is empty.
	res, err = Resume(rows, 3, 1, &Position{Epoch: 3, Stages: []Stage{{World: 2, Done: []int64{a.Shares[0].Rows - 1, a.Shares[1].Rows - 1}}}})
	if err != nil || res.Rest == nil || res.Rest.GlobalRows != 2 || res.Rest.MinRows() != 0 {
		t.Fatalf("resumed %+v, %v: want 2 rows over 3 ranks", res, err)
	}
}

// TestResumeBadPosition: a position that does not fit fails, naming it.
func TestResumeBadPosition(t *testing.T) {
	rows := []int64{10, 20}
	for _, pos := range []*Position{
		{Stages: []Stage{{World: 2, Done: []int64{1}}}},
		{Stages: []Stage{{World: 0}}},
		{Epoch: -1, Stages: []Stage{{World: 1, Done: []int64{1}}}},
		{Stages: []Stage{{World: 40, Done: make([]int64, 40)}}}, // more ranks than rows
		{Stages: make([]Stage, maxStages+1)},
	} {
		if _, err := Resume(rows, 2, 1, pos); !errors.Is(err, ErrPosition) {
			t.Errorf("position %+v: err %v, want ErrPosition", pos, err)
		}
	}
}
