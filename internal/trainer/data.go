package trainer

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
)

// Example is one labelled impression.
//
// Dense holds the dense features in the order of [ModelConfig.Dense]; a NaN
// is a missing value. Sparse holds, for each sparse feature in the order of
// [ModelConfig.Sparse], its ids: one for an id column such as user_id, several
// for a list feature such as a user's recently clicked ads, none when the
// feature is missing (trailing missing features may be left out). Ids of
// string-valued categories come from [HashString]. Label is the click, 0 or
// 1 (soft labels in between are accepted by training).
type Example struct {
	Dense  []float32
	Sparse [][]uint64
	Label  float32
}

// HashString maps a string category to an id for [Example.Sparse].
// It is 64-bit FNV-1a, written out so that hashing allocates nothing.
func HashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Position is where a [Source] stands: the epoch, and how many examples of
// it have been read. Together with the source's own configuration (files,
// seed) it determines every example still to come.
type Position struct {
	Epoch  int64 `json:"epoch"`
	Offset int64 `json:"offset"`
}

// A Source streams training examples, epoch after epoch, in an order that
// depends only on its configuration, so that a resumed run reads exactly
// what an uninterrupted one would have.
//
// Next fills dst with the next examples and returns how many it filled. It
// fills dst completely, crossing epoch boundaries, unless the data ends: then
// it returns the remaining count, possibly 0, with io.EOF. The examples may
// share memory with the source and are valid until the next call.
//
// Position returns the position of the next example Next would return; Seek
// moves there, for resuming from a checkpoint.
type Source interface {
	Next(ctx context.Context, dst []Example) (int, error)
	Position() Position
	Seek(ctx context.Context, pos Position) error
}

// MemorySource is a [Source] over examples in memory, shuffled anew each
// epoch by its seed and the epoch number.
type MemorySource struct {
	examples  []Example
	seed      uint64
	epochs    int64
	pos       Position
	perm      []int
	permEpoch int64 // epoch perm is for; -1 when none
}

// NewMemorySource returns a source that yields examples for the given number
// of epochs (0: without end), each epoch in an order drawn from seed.
func NewMemorySource(examples []Example, seed uint64, epochs int64) *MemorySource {
	return &MemorySource{examples: examples, seed: seed, epochs: epochs, permEpoch: -1}
}

// Next implements [Source].
func (s *MemorySource) Next(ctx context.Context, dst []Example) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(s.examples) == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(dst) {
		if s.epochs > 0 && s.pos.Epoch >= s.epochs {
			return n, io.EOF
		}
		s.shuffle()
		k := copyPerm(dst[n:], s.examples, s.perm[s.pos.Offset:])
		n += k
		s.pos.Offset += int64(k)
		if s.pos.Offset == int64(len(s.examples)) {
			s.pos = Position{Epoch: s.pos.Epoch + 1}
		}
	}
	return n, nil
}

func copyPerm(dst, examples []Example, perm []int) int {
	n := min(len(dst), len(perm))
	for i, j := range perm[:n] {
		dst[i] = examples[j]
	}
	return n
}

// shuffle makes perm the order of the current epoch. It is a Fisher-Yates
// shuffle driven by PCG with a bounded draw of its own, rather than
// rand.Shuffle, so the order is fixed by this code and not by the Go release.
func (s *MemorySource) shuffle() {
	if s.permEpoch == s.pos.Epoch {
		return
	}
	if len(s.perm) != len(s.examples) {
		s.perm = make([]int, len(s.examples))
	}
	for i := range s.perm {
		s.perm[i] = i
	}
	r := rand.NewPCG(s.seed, uint64(s.pos.Epoch))
	for i := len(s.perm) - 1; i > 0; i-- {
		j, _ := bits.Mul64(r.Uint64(), uint64(i+1))
		s.perm[i], s.perm[j] = s.perm[j], s.perm[i]
	}
	s.permEpoch = s.pos.Epoch
}

// Position implements [Source].
func (s *MemorySource) Position() Position { return s.pos }

// Seek implements [Source].
func (s *MemorySource) Seek(ctx context.Context, pos Position) error {
	if pos.Epoch < 0 || pos.Offset < 0 || pos.Offset >= int64(max(len(s.examples), 1)) {
		return fmt.Errorf("trainer: seek to %+v: out of range for %d examples", pos, len(s.examples))
	}
	s.pos = pos
	return nil
}
