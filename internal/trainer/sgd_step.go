package trainer

import (
	"fmt"
	"math"
)

// trainStep trains on t.batch[:n]: gradients of every chunk (phase 1),
// barrier, the dense update here, each partition's summed gradient applied
// by Adagrad (phase 2), barrier. It returns the batch's mean loss and the
// largest norm of an updated row.
func (t *Trainer) trainStep(p *pool, n int) (loss, norm float64, err error) {
	step := t.step + 1
	t.n = n
	p.run(phaseGrad, len(t.chunks))
	for _, ch := range t.chunks { // chunk order: the first bad example wins
		if ch.err != nil {
			t.discardGrads()
			return 0, 0, fmt.Errorf("trainer: step %d: %w", step, ch.err)
		}
		loss += ch.loss
	}
	loss /= float64(n)
	if err := t.cfg.Guard.CheckLoss(step, loss); err != nil {
		t.discardGrads()
		return loss, 0, err
	}

	// The dense gradient is a few floats per chunk: summed in chunk order
	// and applied here while the workers wait.
	clear(t.denseGrad)
	for _, ch := range t.chunks {
		for j, g := range ch.dense {
			t.denseGrad[j] += g
		}
	}
	lr, l2 := float32(t.cfg.LearningRate), float32(t.cfg.L2)
	nd := len(t.model.cfg.Dense)
	adagrad(t.model.dense[:nd], t.accDense[:nd], t.denseGrad[:nd], lr, l2)
	adagrad(t.model.dense[nd:], t.accDense[nd:], t.denseGrad[nd:], lr, 0)

	p.run(phaseUpdate, len(t.chunks))
	for _, m := range t.partMax {
		if m > norm || m != m {
			norm = m
		}
		if norm != norm {
			break
		}
	}
	t.step = step
	return loss, norm, t.cfg.Guard.CheckEmbNorm(step, norm)
}

func (t *Trainer) discardGrads() {
	for _, ch := range t.chunks {
		for p := range ch.parts {
			ch.parts[p].reset()
		}
	}
}

// gradChunk computes the gradient of the summed log loss over chunk c of the
// batch into t.chunks[c], using worker w's scratch.
func (t *Trainer) gradChunk(w, c int) {
	m := t.model
	ch := t.chunks[c]
	ch.loss, ch.err = 0, nil
	clear(ch.dense)
	lo, hi := c*t.n/len(t.chunks), (c+1)*t.n/len(t.chunks)
	nd, nf, width := len(m.cfg.Dense), len(m.cfg.Sparse), m.width
	scratch := t.scratch[w]
	sum := scratch[nf*width : nf*width+m.cfg.Dim]
	xs := scratch[nf*width+m.cfg.Dim : nf*width+m.cfg.Dim+nd]
	gv := scratch[len(scratch)-width:]
	for i := lo; i < hi; i++ {
		ex := &t.batch[i]
		if len(ex.Dense) != nd || len(ex.Sparse) > nf || !(ex.Label >= 0 && ex.Label <= 1) {
			ch.err = fmt.Errorf("example %d of the batch: %w", i, m.Validate(*ex))
			return
		}
		z := m.forward(ex, scratch)
		y := float64(ex.Label)
		ch.loss += logLoss(float64(z), y)
		g := float32(sigmoid(float64(z)) - y) // d loss / d score

		for j, x := range xs { // transformed, 0 when missing
			ch.dense[j] += g * x
		}
		ch.dense[nd] += g
		for f, ids := range ex.Sparse {
			if len(ids) == 0 {
				continue
			}
			// d score / d row of one of f's ids: [1, S - v_f] / len(ids).
			scale := g / float32(len(ids))
			pv := scratch[f*width : (f+1)*width]
			gv[0] = scale
			for j := 1; j < width; j++ {
				gv[j] = scale * (sum[j-1] - pv[j])
			}
			for _, id := range ids {
				r := m.bucket(f, id)
				dst := ch.parts[partition(r, len(ch.parts))].add(r)
				for j, v := range gv {
					dst[j] += v
				}
			}
		}
	}
}

// partition is the update partition of table row r: a function of r alone,
// so that each row's gradients from every chunk meet in one partition.
func partition(r, parts int) int {
	return int(uint64(uint32(r)*0x9e3779b1) * uint64(parts) >> 32)
}

// updatePartition sums partition p's gradients over the chunks in chunk
// order, into chunk 0's accumulator, and applies Adagrad to the rows.
func (t *Trainer) updatePartition(p int) {
	m := t.model
	w := m.width
	dst := &t.chunks[0].parts[p]
	for _, ch := range t.chunks[1:] {
		src := &ch.parts[p]
		for i, r := range src.rows {
			g := src.grads[i*w : (i+1)*w]
			d := dst.add(int(r))
			for j, v := range g {
				d[j] += v
			}
		}
		src.reset()
	}
	lr, l2 := float32(t.cfg.LearningRate), float32(t.cfg.L2)
	var mx float64
	for i, r := range dst.rows {
		lo, hi := int(r)*w, int(r+1)*w
		row := m.emb[lo:hi]
		adagrad(row, t.accEmb[lo:hi], dst.grads[i*w:(i+1)*w], lr, l2)
		if n := rowNorm(row); n > mx || n != n {
			mx = n
		}
	}
	dst.reset()
	t.partMax[p] = mx
}

// adagrad applies one Adagrad step with L2 to weights w, accumulators acc,
// gradients g.
func adagrad(w, acc, g []float32, lr, l2 float32) {
	acc, g = acc[:len(w)], g[:len(w)]
	for j, x := range w {
		gj := g[j] + l2*x
		a := acc[j] + gj*gj
		acc[j] = a
		w[j] = x - lr*gj/float32(math.Sqrt(float64(a)))
	}
}

// sparseAcc accumulates gradient rows for the table rows a chunk touches: an
// open-addressing index from row to position, the rows in first-touch
// order, and their gradients. After the first steps it has grown to size and
// accumulates without allocating.
type sparseAcc struct {
	width int
	slots []int32 // 0: empty; i+1: rows[i]
	shift uint    // 32 - log2(len(slots))
	rows  []uint32
	grads []float32 // len(rows) rows of width
}

// add returns the gradient row of table row r, zeroed when r is new.
func (a *sparseAcc) add(r int) []float32 {
	if 2*(len(a.rows)+1) > len(a.slots) {
		a.grow()
	}
	mask := len(a.slots) - 1
	// A multiplier other than partition's, whose top bits are nearly the
	// same for all rows of a partition.
	h := int(uint32(r) * 0x85ebca6b >> a.shift)
	for {
		s := a.slots[h]
		if s == 0 {
			a.rows = append(a.rows, uint32(r))
			a.slots[h] = int32(len(a.rows))
			n := len(a.grads)
			a.grads = append(a.grads, make([]float32, a.width)...)
			return a.grads[n : n+a.width]
		}
		if a.rows[s-1] == uint32(r) {
			i := int(s-1) * a.width
			return a.grads[i : i+a.width]
		}
		h = (h + 1) & mask
	}
}

func (a *sparseAcc) grow() {
	size := max(64, 2*len(a.slots))
	a.slots = make([]int32, size)
	a.shift = 32
	for s := size; s > 1; s >>= 1 {
		a.shift--
	}
	mask := size - 1
	for i, r := range a.rows {
		h := int(r * 0x85ebca6b >> a.shift)
		for a.slots[h] != 0 {
			h = (h + 1) & mask
		}
		a.slots[h] = int32(i + 1)
	}
}

func (a *sparseAcc) reset() {
	if len(a.rows) == 0 {
		return
	}
	clear(a.slots)
	a.rows = a.rows[:0]
	a.grads = a.grads[:0]
}
