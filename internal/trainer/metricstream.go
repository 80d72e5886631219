package trainer

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// DefaultStreamRun is how many scored rows a [MetricStream] sorts in memory
// (16 bytes each: 16 MiB) before it writes them out as a sorted run.
const DefaultStreamRun = 1 << 20

// MetricStream computes what [Evaluate], [ROC], [CalibrationBins] and
// [EvaluateSlices] compute, over predictions added a batch at a time, in
// memory bounded by its run size and the number of slices.
//
// The AUC and the ROC curve are exact, not bucketed: they need the rows in
// prediction order, so rows are sorted in runs of at most the run size;
// runs past the first go to temporary files and are merged. Walking the
// merged rows from the highest prediction down, each group of tied
// predictions adds its positives times (the negatives below it + half its
// own negatives) to the Mann-Whitney count, an integer, so the AUC is the
// same figure [AUC] computes from ranks. The sums (log loss, mean
// prediction) are added in the order rows come, so they may differ from
// Evaluate's over another order in the last bits only.
type MetricStream struct {
	run     int
	dir     string // "" until the first run is written out
	runs    []string
	buf     []scoredRow
	overall *sums
	slices  map[string]int32
	names   []string
	per     []*sums
	bins    int
	sumPBin []float64
	sumYBin []float64
	nBin    []int
}

// scoredRow is one row: its prediction, label and slice (-1: none).
type scoredRow struct {
	p     float64
	slice int32
	pos   bool
}

// sums are the running figures of Evaluate for one group of rows.
type sums struct {
	count, positives, correct int
	sumP, sumLoss             float64
	// During the walk: negatives seen so far, and twice the Mann-Whitney
	// count, and the current tie group's positives and negatives.
	negSeen, twiceU, gPos, gNeg uint64
}

// NewMetricStream returns a stream that sorts up to run rows in memory
// (0: DefaultStreamRun) and bins predictions into calBins equal-width
// calibration bins.
func NewMetricStream(run, calBins int) *MetricStream {
	if run <= 0 {
		run = DefaultStreamRun
	}
	calBins = max(calBins, 1)
	return &MetricStream{run: run, overall: &sums{}, slices: map[string]int32{}, bins: calBins,
		sumPBin: make([]float64, calBins), sumYBin: make([]float64, calBins), nBin: make([]int, calBins)}
}

// Close removes the stream's temporary files.
func (s *MetricStream) Close() error {
	if s.dir == "" {
		return nil
	}
	return os.RemoveAll(s.dir)
}

// Add adds a batch: predictions, their 0/1 labels and (nil for none) the
// slice of each. It fails as Evaluate does on a label other than 0 or 1 or
// a prediction outside [0, 1], numbering examples over all batches.
func (s *MetricStream) Add(preds []float64, labels []float32, keys []string) error {
	if len(labels) != len(preds) || keys != nil && len(keys) != len(preds) {
		return fmt.Errorf("trainer: %d predictions, %d labels, %d slice keys", len(preds), len(labels), len(keys))
	}
	for i, p := range preds {
		y := labels[i]
		if y != 0 && y != 1 {
			return fmt.Errorf("trainer: label %v of example %d: want 0 or 1", y, s.overall.count)
		}
		if !(p >= 0 && p <= 1) {
			return fmt.Errorf("trainer: prediction %v of example %d: want 0 to 1", p, s.overall.count)
		}
		r := scoredRow{p: p, slice: -1, pos: y == 1}
		s.overall.add(p, r.pos)
		if keys != nil {
			id, ok := s.slices[keys[i]]
			if !ok {
				id = int32(len(s.names))
				s.slices[keys[i]] = id
				s.names = append(s.names, keys[i])
				s.per = append(s.per, &sums{})
			}
			r.slice = id
			s.per[id].add(p, r.pos)
		}
		b := min(int(p*float64(s.bins)), s.bins-1)
		s.sumPBin[b] += p
		if r.pos {
			s.sumYBin[b]++
		}
		s.nBin[b]++
		s.buf = append(s.buf, r)
		if len(s.buf) >= s.run {
			if err := s.spill(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *sums) add(p float64, pos bool) {
	m.count++
	q := p // the probability of the true label
	if pos {
		m.positives++
	} else {
		q = 1 - p
	}
	m.sumLoss -= math.Log(max(q, LogLossEpsilon))
	if (p >= 0.5) == pos {
		m.correct++
	}
	m.sumP += p
}

// sortRun orders rows by prediction, highest first.
func sortRun(rows []scoredRow) {
	slices.SortFunc(rows, func(a, b scoredRow) int { return cmp.Compare(b.p, a.p) })
}

const rowBytes = 13 // prediction, slice, label

// spill writes the buffered rows out as a sorted run.
func (s *MetricStream) spill() error {
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "retrain-metrics-")
		if err != nil {
			return fmt.Errorf("trainer: metrics run: %w", err)
		}
		s.dir = dir
	}
	sortRun(s.buf)
	f, err := os.Create(fmt.Sprintf("%s/run-%05d", s.dir, len(s.runs)))
	if err != nil {
		return fmt.Errorf("trainer: metrics run: %w", err)
	}
	w := bufio.NewWriterSize(f, 256<<10)
	var b [rowBytes]byte
	for _, r := range s.buf {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(r.p))
		binary.LittleEndian.PutUint32(b[8:], uint32(r.slice))
		b[12] = 0
		if r.pos {
			b[12] = 1
		}
		w.Write(b[:])
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("trainer: metrics run: %w", err)
	}
	s.runs = append(s.runs, f.Name())
	s.buf = s.buf[:0]
	return nil
}

// StreamResult is what a [MetricStream] computed.
type StreamResult struct {
	Overall     Metrics
	ROC         []ROCPoint
	Calibration []CalibrationBin
	Slices      map[string]Metrics // nil when no slice keys were added
}

// Finish computes the figures, with an ROC curve of at most rocPoints
// points. It fails when no rows were added.
func (s *MetricStream) Finish(rocPoints int) (StreamResult, error) {
	o := s.overall
	if o.count == 0 {
		return StreamResult{}, errors.New("trainer: no examples to evaluate")
	}
	next, stop, err := s.merged()
	if err != nil {
		return StreamResult{}, err
	}
	defer stop()
	pos, neg := uint64(o.positives), uint64(o.count-o.positives)
	roc := newROCThinner(rocPoints)
	var tp, fp uint64
	var touched []int32
	endGroup := func() {
		o.endGroup(neg)
		tp, fp = tp+o.gPos, fp+o.gNeg
		if pos > 0 && neg > 0 {
			roc.add(ROCPoint{FPR: float64(fp) / float64(neg), TPR: float64(tp) / float64(pos)})
		}
		o.gPos, o.gNeg = 0, 0
		for _, id := range touched {
			m := s.per[id]
			m.endGroup(uint64(m.count - m.positives))
			m.gPos, m.gNeg = 0, 0
		}
		touched = touched[:0]
	}
	first := true
	var last float64
	for {
		r, ok, err := next()
		if err != nil {
			return StreamResult{}, err
		}
		if !ok {
			break
		}
		if !first && r.p != last {
			endGroup()
		}
		first, last = false, r.p
		if r.pos {
			o.gPos++
		} else {
			o.gNeg++
		}
		if r.slice >= 0 {
			m := s.per[r.slice]
			if m.gPos+m.gNeg == 0 {
				touched = append(touched, r.slice)
			}
			if r.pos {
				m.gPos++
			} else {
				m.gNeg++
			}
		}
	}
	endGroup()
	res := StreamResult{Overall: o.metrics()}
	if pos > 0 && neg > 0 {
		res.ROC = roc.finish()
	}
	for b := range s.bins {
		if s.nBin[b] == 0 {
			continue
		}
		c := float64(s.nBin[b])
		res.Calibration = append(res.Calibration, CalibrationBin{
			Lo: float64(b) / float64(s.bins), Hi: float64(b+1) / float64(s.bins),
			MeanPrediction: s.sumPBin[b] / c, MeanLabel: s.sumYBin[b] / c, Count: s.nBin[b],
		})
	}
	if len(s.names) > 0 {
		res.Slices = make(map[string]Metrics, len(s.names))
		for i, name := range s.names {
			res.Slices[name] = s.per[i].metrics()
		}
	}
	return res, nil
}

// endGroup adds a tie group's pairs to the Mann-Whitney count: each of its
// positives beats the negatives below it and ties its own negatives.
func (m *sums) endGroup(neg uint64) {
	below := neg - m.negSeen - m.gNeg
	m.twiceU += m.gPos * (2*below + m.gNeg)
	m.negSeen += m.gNeg
}

func (m *sums) metrics() Metrics {
	n := float64(m.count)
	out := Metrics{
		Count: m.count, Positives: m.positives,
		LogLoss: m.sumLoss / n, Accuracy: float64(m.correct) / n,
		MeanPrediction: m.sumP / n, MeanLabel: float64(m.positives) / n,
	}
	out.Calibration = out.MeanPrediction / out.MeanLabel
	pos, neg := float64(m.positives), float64(m.count-m.positives)
	out.AUC = math.NaN()
	if pos > 0 && neg > 0 {
		out.AUC = float64(m.twiceU) / 2 / (pos * neg)
	}
	return out
}

// merged returns the rows in prediction order, highest first: the buffer
// sorted, merged with the runs on disk.
func (s *MetricStream) merged() (next func() (scoredRow, bool, error), stop func(), err error) {
	sortRun(s.buf)
	h := &runHeap{}
	var files []*os.File
	stop = func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, path := range s.runs {
		f, err := os.Open(path)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("trainer: metrics run: %w", err)
		}
		files = append(files, f)
		rr := &runReader{r: bufio.NewReaderSize(f, 64<<10)}
		if ok, err := rr.next(); err != nil {
			stop()
			return nil, nil, err
		} else if ok {
			h.rs = append(h.rs, rr)
		}
	}
	mem := &runReader{mem: s.buf}
	if ok, _ := mem.next(); ok {
		h.rs = append(h.rs, mem)
	}
	heap.Init(h)
	next = func() (scoredRow, bool, error) {
		if len(h.rs) == 0 {
			return scoredRow{}, false, nil
		}
		top := h.rs[0]
		r := top.cur
		ok, err := top.next()
		if err != nil {
			return scoredRow{}, false, err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
		return r, true, nil
	}
	return next, stop, nil
}

// runReader reads one sorted run: a file, or the in-memory buffer.
type runReader struct {
	r   *bufio.Reader
	mem []scoredRow
	cur scoredRow
	b   [rowBytes]byte
}

func (rr *runReader) next() (bool, error) {
	if rr.r == nil {
		if len(rr.mem) == 0 {
			return false, nil
		}
		rr.cur, rr.mem = rr.mem[0], rr.mem[1:]
		return true, nil
	}
	if _, err := io.ReadFull(rr.r, rr.b[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, fmt.Errorf("trainer: read metrics run: %w", err)
	}
	rr.cur = scoredRow{
		p:     math.Float64frombits(binary.LittleEndian.Uint64(rr.b[:])),
		slice: int32(binary.LittleEndian.Uint32(rr.b[8:])),
		pos:   rr.b[12] == 1,
	}
	return true, nil
}

type runHeap struct{ rs []*runReader }

func (h *runHeap) Len() int           { return len(h.rs) }
func (h *runHeap) Less(i, j int) bool { return h.rs[i].cur.p > h.rs[j].cur.p }
func (h *runHeap) Swap(i, j int)      { h.rs[i], h.rs[j] = h.rs[j], h.rs[i] }
func (h *runHeap) Push(x any)         { h.rs = append(h.rs, x.(*runReader)) }
func (h *runHeap) Pop() any {
	x := h.rs[len(h.rs)-1]
	h.rs = h.rs[:len(h.rs)-1]
	return x
}

// rocThinner builds ROC's curve from its points as they come, threshold
// going down, without holding the whole curve: it keeps the points until
// there are more than n, and then thins as [thin] does, which needs only
// the length walked so far. The last point is held back, as ROC sets it to
// (1, 1) exactly.
type rocThinner struct {
	n        int
	buf      []ROCPoint // (0, 0) and the interior points, until thinning
	thinning bool
	out      []ROCPoint
	prev     ROCPoint // the interior point before, for the length walked
	walked   float64
	step     float64
	nextMark float64
	pending  *ROCPoint
}

func newROCThinner(n int) *rocThinner {
	n = max(n, 2)
	return &rocThinner{n: n, buf: []ROCPoint{{0, 0}}}
}

func (t *rocThinner) add(p ROCPoint) {
	if t.pending != nil {
		t.interior(*t.pending)
	}
	t.pending = &p
}

// interior takes a point that is not the curve's last.
func (t *rocThinner) interior(p ROCPoint) {
	if !t.thinning {
		t.buf = append(t.buf, p)
		// The curve has at least one more point (the pending one).
		if len(t.buf)+1 <= t.n {
			return
		}
		t.thinning = true
		t.out = append(make([]ROCPoint, 0, t.n), t.buf[0])
		t.step = 2.0 / float64(t.n-1)
		t.nextMark = t.step
		t.prev = t.buf[0]
		pts := t.buf[1:]
		t.buf = nil
		for _, q := range pts {
			t.thinPoint(q)
		}
		return
	}
	t.thinPoint(p)
}

func (t *rocThinner) thinPoint(p ROCPoint) {
	t.walked += p.FPR - t.prev.FPR + p.TPR - t.prev.TPR
	t.prev = p
	if t.walked >= t.nextMark && len(t.out) < t.n-1 {
		t.out = append(t.out, p)
		for t.nextMark <= t.walked {
			t.nextMark += t.step
		}
	}
}

func (t *rocThinner) finish() []ROCPoint {
	last := ROCPoint{1, 1}
	if t.thinning {
		return append(t.out, last)
	}
	return append(t.buf, last)
}
