package trainer

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/retrain-ml/retrain/internal/splitmix"
)

// DefaultBuckets is the size of the hashed embedding table unless
// configured: room for a few hundred thousand distinct ids at a low collision
// rate, 9 MiB of weights at Dim 8.
const DefaultBuckets = 1 << 18

// MaxDim bounds ModelConfig.Dim.
const MaxDim = 1024

// ModelConfig is the shape of a [Model].
type ModelConfig struct {
	Dense []string // dense feature names, the order of Example.Dense
	// Transforms, parallel to Dense, transform dense features before the
	// model sees them; missing entries are Identity.
	Transforms []Transform
	Sparse     []string // sparse (id) feature names, the order of Example.Sparse
	Buckets    int      // rows of the hashed table; 0 means DefaultBuckets
	// Dim is the embedding dimension of the pairwise term; 0 makes the
	// model logistic regression with hashed id weights.
	Dim int
}

// Transform maps a dense feature's raw value to what the model is linear
// in. It is part of the model, applied alike in training and in Predict, so
// that whoever scores the model cannot forget it or apply another.
type Transform uint8

const (
	Identity Transform = iota
	Log                // log(max(x, 1e-6)), for counts and positive scales such as activity
	Log1p              // log(1 + max(x, 0)), for counts that may be 0
	Logit              // log(p/(1-p)), p = x clipped to [1e-4, 1-1e-4], for rates such as a CTR
)

var transformNames = [...]string{Identity: "identity", Log: "log", Log1p: "log1p", Logit: "logit"}

func (t Transform) String() string {
	if int(t) < len(transformNames) {
		return transformNames[t]
	}
	return fmt.Sprintf("Transform(%d)", uint8(t))
}

// MarshalText implements encoding.TextMarshaler.
func (t Transform) MarshalText() ([]byte, error) {
	if int(t) >= len(transformNames) {
		return nil, fmt.Errorf("trainer: unknown transform %d", uint8(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler: identity (or empty),
// log, log1p or logit.
func (t *Transform) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*t = Identity
		return nil
	}
	for i, name := range transformNames {
		if string(b) == name {
			*t = Transform(i)
			return nil
		}
	}
	return fmt.Errorf("trainer: transform %q: want identity, log, log1p or logit", b)
}

func (t Transform) apply(x float32) float32 {
	switch t {
	case Log:
		return float32(math.Log(max(float64(x), 1e-6)))
	case Log1p:
		return float32(math.Log1p(max(float64(x), 0)))
	case Logit:
		p := min(max(float64(x), 1e-4), 1-1e-4)
		return float32(math.Log(p / (1 - p)))
	}
	return x
}

func (c ModelConfig) withDefaults() ModelConfig {
	if c.Buckets == 0 {
		c.Buckets = DefaultBuckets
	}
	return c
}

func (c ModelConfig) validate() error {
	if c.Buckets < 1 || c.Buckets > 1<<31 {
		return fmt.Errorf("trainer: buckets %d: want 1 to 2^31", c.Buckets)
	}
	if c.Dim < 0 || c.Dim > MaxDim {
		return fmt.Errorf("trainer: dim %d: want 0 to %d", c.Dim, MaxDim)
	}
	if len(c.Transforms) > len(c.Dense) {
		return fmt.Errorf("trainer: %d transforms for %d dense features", len(c.Transforms), len(c.Dense))
	}
	for _, t := range c.Transforms {
		if int(t) >= len(transformNames) {
			return fmt.Errorf("trainer: unknown transform %d", uint8(t))
		}
	}
	seen := make(map[string]bool)
	for _, name := range slices.Concat(c.Dense, c.Sparse) {
		if name == "" {
			return errors.New("trainer: empty feature name")
		}
		if seen[name] {
			return fmt.Errorf("trainer: feature %q named twice", name)
		}
		seen[name] = true
	}
	return nil
}

// Model is a trained CTR model: a factorization machine over hashed ids
// plus linear dense features (see the package documentation). Its methods
// may be called concurrently.
type Model struct {
	cfg        ModelConfig
	transforms []Transform // one per dense feature
	width      int         // floats per table row: 1 + Dim
	dense      []float32   // dense weights, then the bias
	emb        []float32   // Buckets rows of width floats: [w, v_1..v_Dim]
}

func newModel(cfg ModelConfig) (*Model, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Dense = slices.Clone(cfg.Dense)
	cfg.Sparse = slices.Clone(cfg.Sparse)
	cfg.Transforms = slices.Clone(cfg.Transforms)
	transforms := make([]Transform, len(cfg.Dense))
	copy(transforms, cfg.Transforms)
	w := 1 + cfg.Dim
	return &Model{
		cfg:        cfg,
		transforms: transforms,
		width:      w,
		dense:      make([]float32, len(cfg.Dense)+1),
		emb:        make([]float32, cfg.Buckets*w),
	}, nil
}

// initEmbeddings draws every embedding weight uniformly with standard
// deviation std from a hash of the seed and the weight's index: the same
// weights for a seed whatever the Go release, and no generator state.
func (m *Model) initEmbeddings(seed uint64, std float64) {
	if m.cfg.Dim == 0 || std == 0 {
		return
	}
	a := math.Sqrt(3) * std
	for i := range m.emb {
		if i%m.width == 0 {
			continue // the linear weight starts at 0
		}
		u := float64(splitmix.Mix64(seed^splitmix.Mix64(uint64(i)))>>11) / (1 << 53) // [0, 1)
		m.emb[i] = float32((2*u - 1) * a)
	}
}

// Config returns the model's shape.
func (m *Model) Config() ModelConfig {
	c := m.cfg
	c.Dense = slices.Clone(c.Dense)
	c.Sparse = slices.Clone(c.Sparse)
	c.Transforms = slices.Clone(c.Transforms)
	return c
}

// hashVersion names the id hashing below; it is part of the model format,
// since a model only means something with the hash it was trained with.
const hashVersion = 1

// bucket is the table row of an id of sparse feature f. Salting with the
// feature keeps user 7 and ad 7 apart; the multiply-shift maps the hash to
// [0, Buckets) without a division.
func (m *Model) bucket(f int, id uint64) int {
	h := splitmix.Mix64(id ^ (uint64(f+1) * 0x9e3779b97f4a7c15))
	return int((h >> 32) * uint64(m.cfg.Buckets) >> 32)
}

func (m *Model) row(r int) []float32 {
	return m.emb[r*m.width : (r+1)*m.width : (r+1)*m.width]
}

// scratchLen is the scratch forward needs: the pooled row of each sparse
// feature, the sum of their embeddings, the transformed dense features.
func (m *Model) scratchLen() int { return len(m.cfg.Sparse)*m.width + m.cfg.Dim + len(m.cfg.Dense) }

// forward returns the score (log-odds) of ex, leaving in scratch what the
// gradient needs: each sparse feature's pooled row, then Σ_f v_f, then the
// transformed dense features (0 when missing). Dense values beyond the
// configured ones are ignored, missing ones are missing.
func (m *Model) forward(ex *Example, scratch []float32) float32 {
	w := m.width
	nf := len(m.cfg.Sparse)
	nd := len(m.cfg.Dense)
	xs := scratch[nf*w+m.cfg.Dim : nf*w+m.cfg.Dim+nd]
	clear(xs)
	s := m.dense[nd] // bias
	for j, x := range ex.Dense[:min(len(ex.Dense), nd)] {
		if x != x { // NaN is missing
			continue
		}
		if t := m.transforms[j]; t != Identity {
			x = t.apply(x)
		}
		xs[j] = x
		s += m.dense[j] * x
	}
	sum := scratch[nf*w : nf*w+m.cfg.Dim]
	clear(sum)
	var sq float32 // Σ_f ‖v_f‖²
	for f := range nf {
		pv := scratch[f*w : (f+1)*w : (f+1)*w]
		clear(pv)
		if f >= len(ex.Sparse) || len(ex.Sparse[f]) == 0 {
			continue
		}
		ids := ex.Sparse[f]
		for _, id := range ids {
			row := m.row(m.bucket(f, id))
			for j, v := range row {
				pv[j] += v
			}
		}
		if len(ids) > 1 {
			inv := 1 / float32(len(ids))
			for j := range pv {
				pv[j] *= inv
			}
		}
		s += pv[0]
		for j, v := range pv[1:] {
			sum[j] += v
			sq += v * v
		}
	}
	var ss float32
	for _, v := range sum {
		ss += v * v
	}
	return s + 0.5*(ss-sq)
}

// sigmoid is 1/(1+e^-z), computed without overflow on either side.
func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// logLoss is the log loss of score z for label y, log(1+e^z) - y·z, which
// stays finite and exact where log(sigmoid(z)) would round to log(0).
func logLoss(z, y float64) float64 {
	return max(z, 0) + math.Log1p(math.Exp(-math.Abs(z))) - y*z
}

// predictStack is the scratch Predict keeps on the stack: enough for, say,
// 15 sparse features at Dim 31.
const predictStack = 512

// Predict returns the click probability of ex.
func (m *Model) Predict(ex Example) float64 {
	var stack [predictStack]float32
	scratch := stack[:]
	if n := m.scratchLen(); n > len(scratch) {
		scratch = make([]float32, n)
	}
	return sigmoid(float64(m.forward(&ex, scratch)))
}

// PredictBatch writes the click probability of each example to dst, which
// it grows to len(exs) when short, and returns it.
func (m *Model) PredictBatch(exs []Example, dst []float64) []float64 {
	dst = slices.Grow(dst[:0], len(exs))[:len(exs)]
	scratch := make([]float32, m.scratchLen())
	for i := range exs {
		dst[i] = sigmoid(float64(m.forward(&exs[i], scratch)))
	}
	return dst
}

// Validate reports whether ex has the model's shape, which Predict assumes
// and training requires.
func (m *Model) Validate(ex Example) error {
	if len(ex.Dense) != len(m.cfg.Dense) {
		return fmt.Errorf("trainer: example has %d dense features, model %d", len(ex.Dense), len(m.cfg.Dense))
	}
	if len(ex.Sparse) > len(m.cfg.Sparse) {
		return fmt.Errorf("trainer: example has %d sparse features, model %d", len(ex.Sparse), len(m.cfg.Sparse))
	}
	if !(ex.Label >= 0 && ex.Label <= 1) {
		return fmt.Errorf("trainer: label %v: want 0 to 1", ex.Label)
	}
	return nil
}

// EmbMaxNorm returns the largest L2 norm of a table row [w, v...], over
// the whole table.
func (m *Model) EmbMaxNorm() float64 {
	var mx float64
	for r := range m.cfg.Buckets {
		n := rowNorm(m.row(r))
		if n > mx || n != n {
			mx = n
		}
		if mx != mx {
			break
		}
	}
	return mx
}

func rowNorm(row []float32) float64 {
	var s float64
	for _, v := range row {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

const modelMagic = "RTRNMODL"

// WriteTo writes the model in retrain's binary model format: a header with
// the shape, feature names and hash version, the weights as little-endian
// float32s, and a CRC-32.
func (m *Model) WriteTo(w io.Writer) (int64, error) {
	e := newEncoder(w)
	m.encode(e)
	return e.n, e.flush()
}

func (m *Model) encode(e *encoder) {
	e.bytes([]byte(modelMagic))
	e.u32(1) // format version
	e.u32(hashVersion)
	e.u32(uint32(m.cfg.Buckets))
	e.u32(uint32(m.cfg.Dim))
	e.strs(m.cfg.Dense)
	tb := make([]byte, len(m.transforms))
	for i, t := range m.transforms {
		tb[i] = byte(t)
	}
	e.bytes(tb)
	e.strs(m.cfg.Sparse)
	e.f32s(m.dense)
	e.f32s(m.emb)
	e.checksum()
}

// ReadModel reads a model written by [Model.WriteTo].
func ReadModel(r io.Reader) (*Model, error) {
	d := newDecoder(r)
	m, err := decodeModel(d)
	if err != nil {
		return nil, fmt.Errorf("trainer: read model: %w", err)
	}
	return m, nil
}

func decodeModel(d *decoder) (*Model, error) {
	if string(d.bytes(len(modelMagic))) != modelMagic && d.err == nil {
		return nil, errors.New("not a retrain model")
	}
	if v := d.u32(); v != 1 && d.err == nil {
		return nil, fmt.Errorf("model format version %d: want 1", v)
	}
	if v := d.u32(); v != hashVersion && d.err == nil {
		return nil, fmt.Errorf("hash version %d: want %d", v, hashVersion)
	}
	var cfg ModelConfig
	cfg.Buckets = int(d.u32())
	cfg.Dim = int(d.u32())
	cfg.Dense = d.strs()
	for _, b := range d.bytes(len(cfg.Dense)) {
		cfg.Transforms = append(cfg.Transforms, Transform(b))
	}
	cfg.Sparse = d.strs()
	if d.err != nil {
		return nil, d.err
	}
	if cfg.Buckets == 0 {
		return nil, errors.New("zero buckets")
	}
	m, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	d.f32s(m.dense)
	d.f32s(m.emb)
	d.checksum()
	if d.err != nil {
		return nil, d.err
	}
	return m, nil
}
