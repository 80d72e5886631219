package shard

import (
	"errors"
	"fmt"
)

// A gang that resumes an epoch from a checkpoint with the world size it
// had keeps its shares, and each rank goes on from its position in its
// own. One with another world size cannot: the old shares do not divide
// among the new ranks. It gets, besides its shares for the later epochs,
// the rest of the interrupted epoch (Rest) assigned afresh to its ranks
// (AssignRest), and trains that first. An epoch can be interrupted again
// while its rest is trained, by a gang of yet another size: its Position
// is then a chain of stages, each the rest of the one before, which every
// host recomputes from the split alone.

// Stage is the part of an epoch one world size trained: rank r trained
// the first Done[r] rows of its share (of the epoch, for the first stage;
// of the rest the stage before left, for the others).
type Stage struct {
	World int     `json:"world"`
	Done  []int64 `json:"done"`
}

// Position is how far an epoch went, at a checkpoint: the stages it was
// trained in, the last being the one the checkpoint was written in.
type Position struct {
	Epoch  int     `json:"epoch"`
	Stages []Stage `json:"stages"`
}

// maxStages bounds a position's chain (each a resume with another world
// size within one epoch); a longer one is not a position this package
// wrote.
const maxStages = 64

// Resumed is what a gang of some world size trains on, resuming at a
// position.
type Resumed struct {
	// Full is the assignment of a whole epoch (epoch 0's: the ranks keep
	// their shares for every epoch).
	Full Assignment
	// Rest, when not nil, is the rest of epoch Epoch, to be trained
	// before the next epoch on Full; Prior are the stages of that epoch
	// before Rest's own, which a checkpoint's position in Rest extends.
	Rest  *Assignment
	Epoch int
	Prior []Stage
	// RestDone[r] is how many rows of its Rest share rank r had trained
	// at pos (a gang of the same size resuming within the rest); nil: none.
	RestDone []int64
}

// ErrPosition is a position that does not fit the split or is not one
// this package wrote.
var ErrPosition = errors.New("shard: bad position")

// Every rank's Done counts the rows of its share in the share's order
// (its pieces' order): a trainer that shuffles its rows within its share
// has no such prefix, and its position cannot be resumed with another
// world size.

// Resume is what a gang of world ranks trains on to resume at pos (nil:
// from the start of an epoch, or a checkpoint that recorded no
// position): Full alone when its world size is the one of pos's last
// stage and that stage trained the epoch's own shares (each rank goes on
// from its position in them), and the rest of pos's epoch otherwise,
// the rows of the epoch no stage trained, each once over the new ranks. A
// rest with fewer rows than ranks leaves the last ranks' rest shares
// empty; an epoch trained to its end leaves no rest (Rest is nil).
func Resume(rows []int64, world int, seed uint64, pos *Position) (Resumed, error) {
	full, err := Assign(rows, world, seed, 0)
	if err != nil {
		return Resumed{}, err
	}
	res := Resumed{Full: full}
	if pos == nil || len(pos.Stages) == 0 {
		return res, nil
	}
	if len(pos.Stages) > maxStages || pos.Epoch < 0 {
		return Resumed{}, fmt.Errorf("%w: epoch %d, %d stages", ErrPosition, pos.Epoch, len(pos.Stages))
	}
	res.Epoch = pos.Epoch
	// The last stage's assignment, recomputed along the chain.
	var cur Assignment
	for k, st := range pos.Stages {
		if st.World < 1 || len(st.Done) != st.World {
			return Resumed{}, fmt.Errorf("%w: stage %d has %d ranks' progress for %d ranks", ErrPosition, k, len(st.Done), st.World)
		}
		if k == 0 {
			if st.World == world {
				cur = full
			} else if cur, err = Assign(rows, st.World, seed, 0); err != nil {
				return Resumed{}, fmt.Errorf("%w: stage 0: %v", ErrPosition, err)
			}
			continue
		}
		rest, err := Rest(cur, pos.Stages[k-1].Done)
		if err != nil {
			return Resumed{}, fmt.Errorf("%w: stage %d: %v", ErrPosition, k, err)
		}
		if cur, err = assignRest(rest, st.World, seed, pos.Epoch, true); err != nil {
			return Resumed{}, fmt.Errorf("%w: stage %d: %v", ErrPosition, k, err)
		}
	}
	last := pos.Stages[len(pos.Stages)-1]
	if last.World == world {
		if len(pos.Stages) == 1 {
			return res, nil // the same shares: each rank goes on in its own
		}
		// The same rest as the last stage's: each rank goes on in its
		// share of it.
		res.Rest, res.Prior, res.RestDone = &cur, pos.Stages[:len(pos.Stages)-1], last.Done
		return res, nil
	}
	rest, err := Rest(cur, last.Done)
	if err != nil {
		return Resumed{}, fmt.Errorf("%w: %v", ErrPosition, err)
	}
	a, err := assignRest(rest, world, seed, pos.Epoch, true)
	if err != nil {
		return Resumed{}, err
	}
	res.Prior = pos.Stages
	if a.GlobalRows > 0 {
		res.Rest = &a
	}
	return res, nil
}

// At is the position of a checkpoint written when the ranks of r's world
// had trained done[r] rows of their shares of epoch: of the rest, when
// the epoch is the rest's, else of their full shares.
func (r Resumed) At(epoch int, done []int64) Position {
	done = append([]int64(nil), done...)
	world := r.Full.World
	if r.Rest != nil && epoch == r.Epoch {
		stages := append(append([]Stage(nil), r.Prior...), Stage{World: world, Done: done})
		return Position{Epoch: epoch, Stages: stages}
	}
	return Position{Epoch: epoch, Stages: []Stage{{World: world, Done: done}}}
}
