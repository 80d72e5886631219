package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/retrain-ml/retrain/nodes/internal/objects"
	"github.com/retrain-ml/retrain/nodes/internal/process"
	"github.com/retrain-ml/retrain/nodes/split"

	"go.temporal.io/sdk/activity"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// Trainers a train node can run.
const (
	BuiltinTrainer = "builtin"
	CommandTrainer = "command"
)

// EnvGPUs tells a command trainer how many GPUs it was given (also the
// length of CUDA_VISIBLE_DEVICES), e.g. for torchrun --nproc_per_node.
const EnvGPUs = "RETRAIN_GPUS"

// ModelFile is the builtin model's artifact in a candidate folder.
const ModelFile = "model.bin"

// maxCurvePoints bounds the loss curve kept for the report.
const maxCurvePoints = 2000

// doc is the train node type's description.
const doc = "Train a candidate model on a split (${nodes.split.outputs.uri}): the builtin pure-Go CTR trainer (hashed factorization machine, " +
	"synchronous data-parallel Adagrad), or a command (your trainer program, e.g. torchrun) that follows retrain's trainer contract. " +
	"Checkpoints go to the object store; a retried attempt resumes from the last one. A diverging run (NaN/Inf loss, embedding norm " +
	"above max_emb_norm) fails without retry, naming the step and the figure. Outputs the candidate's folder (model_uri) and the loss curve."

// TrainType is the `train` node type's declaration (its name, fields and
// outputs), for code that names or documents it without running it.
var TrainType = (&Trainers{}).Type().NodeType

// With is a train node's `with` block: the one place its fields, their
// defaults and docs are declared. A field tagged trainer:"builtin" or
// trainer:"command" is taken only by that trainer (checkTrain refuses it
// with the other), and its doc says so first.
type With struct {
	Data       string  `json:"data" required:"true" doc:"the split to train on: ${nodes.split.outputs.uri}"`
	Trainer    string  `json:"trainer" default:"builtin" doc:"builtin or command"`
	MaxEmbNorm float64 `json:"max_emb_norm" default:"100" doc:"divergence guard: the largest embedding row L2 norm allowed (0 = only NaN/Inf)"`

	Dense           []string          `json:"dense" trainer:"builtin" doc:"builtin: dense features (default: the split's)"`
	Sparse          []string          `json:"sparse" trainer:"builtin" doc:"builtin: id features (default: the split's)"`
	Transforms      map[string]string `json:"transforms" trainer:"builtin" doc:"builtin: dense feature -> identity, log, log1p or logit"`
	Dim             int               `json:"dim" trainer:"builtin" default:"8" doc:"builtin: embedding size of the factorization machine (0: logistic regression)"`
	Buckets         int               `json:"buckets" trainer:"builtin" default:"262144" doc:"builtin: rows of the hashed id table"`
	Epochs          int64             `json:"epochs" trainer:"builtin" default:"2" doc:"builtin: passes over the training data"`
	Steps           int64             `json:"steps" trainer:"builtin" doc:"builtin: stop after this many steps (default: the end of the epochs)"`
	BatchSize       int               `json:"batch_size" trainer:"builtin" default:"1024" doc:"builtin: global batch of one synchronous step"`
	LearningRate    float64           `json:"learning_rate" trainer:"builtin" default:"0.05" doc:"builtin: Adagrad learning rate"`
	L2              float64           `json:"l2" trainer:"builtin" default:"0.001" doc:"builtin: L2 regularization of the weights a step updates"`
	Seed            uint64            `json:"seed" trainer:"builtin" default:"1" doc:"builtin: seed of the initial weights and the shuffle (0 is the same as 1)"`
	Workers         int               `json:"workers" trainer:"builtin" doc:"builtin: goroutines computing gradients in lockstep (default: the CPUs); does not change the result"`
	CheckpointEvery int64             `json:"checkpoint_every" trainer:"builtin" default:"50" doc:"builtin: steps between checkpoints"`

	Argv []string          `json:"argv" trainer:"command" doc:"command: the trainer program and its arguments (no shell unless argv names one)"`
	Env  map[string]string `json:"env" trainer:"command" doc:"command: extra environment"`
	Dir  string            `json:"dir" trainer:"command" doc:"command: working directory"`
	GPUs int               `json:"gpus" trainer:"command" doc:"command: GPUs to lease on the worker (CUDA_VISIBLE_DEVICES, RETRAIN_GPUS); run the node on the GPU queue"`
}

// Outputs are what a train node outputs. Both trainers output every key
// but examples (builtin only) and gpu (a command given GPUs, on a worker
// that samples their utilization).
type Outputs struct {
	Trainer     string `json:"trainer"`
	ModelURI    string `json:"model_uri"` // the candidate's folder
	Steps       int64  `json:"steps"`
	ResumedFrom int64  `json:"resumed_from"` // the step this attempt resumed from; 0 if none
	Examples    *int64 `json:"examples,omitempty"`
	// Loss is the last step's loss; null when it is not finite, which JSON
	// cannot carry.
	Loss         *float64  `json:"loss"`
	LossCurveURI string    `json:"loss_curve_uri"`
	Checkpoint   string    `json:"checkpoint"` // the last checkpoint's URI
	TrainRows    int64     `json:"train_rows"`
	GPUs         int       `json:"gpus"`
	GPU          *GPUUsage `json:"gpu,omitempty"`
}

// GPUUsage sums up how busy a command trainer kept its GPUs.
type GPUUsage struct {
	Samples         int      `json:"samples"`
	MeanUtilization float64  `json:"mean_utilization"`
	MaxUtilization  uint32   `json:"max_utilization"`
	IdleGPUs        []string `json:"idle_gpus"`
	IdleWarnings    int      `json:"idle_warnings"`
}

// Fields only one trainer takes, by their trainer tag.
var (
	builtinOnly = trainerFields(BuiltinTrainer)
	commandOnly = trainerFields(CommandTrainer)
)

// trainerFields are the `with` keys of With's fields tagged
// trainer:"kind".
func trainerFields(kind string) []string {
	var names []string
	for _, sf := range reflect.VisibleFields(reflect.TypeFor[With]()) {
		if sf.Tag.Get("trainer") == kind {
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			names = append(names, name)
		}
	}
	return names
}

// checkTrain checks what the schema cannot: which trainer takes which
// fields, transforms, and the ranges of numbers.
func checkTrain(with map[string]any) error {
	kind := BuiltinTrainer
	if t, ok := with["trainer"].(string); ok && !dags.HasRef(t) {
		kind = t
	}
	var wrong []string
	switch kind {
	case BuiltinTrainer:
		for _, f := range commandOnly {
			if _, ok := with[f]; ok {
				wrong = append(wrong, f)
			}
		}
	case CommandTrainer:
		if _, ok := with["argv"]; !ok {
			return errors.New("trainer command needs argv")
		}
		if argv, ok := with["argv"].([]any); ok && len(argv) == 0 {
			return errors.New("argv must name a program")
		}
		for _, f := range builtinOnly {
			if _, ok := with[f]; ok {
				wrong = append(wrong, f)
			}
		}
	default:
		if dags.HasRef(with["trainer"]) {
			return nil
		}
		return fmt.Errorf("trainer %q: want builtin or command", kind)
	}
	if len(wrong) > 0 {
		return fmt.Errorf("trainer %s does not take %s", kind, strings.Join(wrong, ", "))
	}
	if tr, ok := with["transforms"].(map[string]any); ok {
		for name, v := range tr {
			if s, ok := v.(string); ok && !dags.HasRef(s) {
				var t trainer.Transform
				if err := t.UnmarshalText([]byte(s)); err != nil {
					return fmt.Errorf("transforms: %s: %v", name, err)
				}
			}
		}
	}
	for _, f := range []string{"epochs", "batch_size", "workers", "checkpoint_every", "buckets"} {
		if n, ok := with[f].(float64); ok && n < 1 {
			return fmt.Errorf("%s must be at least 1, got %v", f, n)
		}
	}
	for _, f := range []string{"gpus", "dim", "steps", "max_emb_norm", "l2"} {
		if n, ok := with[f].(float64); ok && n < 0 {
			return fmt.Errorf("%s must not be negative, got %v", f, n)
		}
	}
	if n, ok := with["learning_rate"].(float64); ok && !(n > 0) {
		return fmt.Errorf("learning_rate must be positive, got %v", n)
	}
	return nil
}

// Trainers runs train nodes.
type Trainers struct {
	Store  *s3store.Store // nil: no object store configured
	Logger *slog.Logger
	// GPUs leases this worker's GPUs to command trainers; nil on a worker
	// without GPUs. Monitor samples their utilization while a job runs.
	GPUs    *gpu.Allocator
	Monitor gpu.UtilizationReader
	// SamplerConfig tunes the utilization sampler (tests shorten it).
	SamplerConfig gpu.SamplerConfig
}

// Type is the train node type, run by t.
func (t *Trainers) Type() nodetype.Type {
	return nodetype.New(dags.NodeType{Name: "train", Doc: doc, Check: checkTrain}, t.train)
}

// Run runs one attempt of a train node, as t.Type() does.
func (t *Trainers) Run(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	return t.Type().Run(ctx, in)
}

// TrainProgress is a train node's heartbeat: the latest step and the last
// checkpoint, so that a retried attempt resumes there.
type TrainProgress struct {
	Step           int64  `json:"step"`
	Checkpoint     string `json:"checkpoint,omitempty"`
	CheckpointStep int64  `json:"checkpoint_step,omitempty"`
}

// CurvePoint is one point of a loss curve.
type CurvePoint struct {
	Step           int64   `json:"step"`
	Loss           float64 `json:"loss"`
	EmbMaxNorm     float64 `json:"emb_max_norm,omitempty"`
	ExamplesPerSec float64 `json:"examples_per_sec,omitempty"`
}

// trainRun is one attempt of a train node.
type trainRun struct {
	t      *Trainers
	in     nodetype.Input
	w      With
	log    *slog.Logger
	prefix string // checkpoints/P/R/N/F/: this node's folder for its inputs
	guard  trainer.Guard

	mu    sync.Mutex
	curve []CurvePoint
	last  TrainProgress
}

func (r *trainRun) curveKey() string    { return r.prefix + "training/curve.json" }
func (r *trainRun) modelPrefix() string { return r.prefix + "model/" }

// train runs one attempt of a train node.
func (t *Trainers) train(ctx context.Context, in nodetype.Input, w With) (Outputs, error) {
	// The schema checked the types; the rules across fields are checked
	// again here on the resolved block.
	if err := checkTrain(in.With); err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if t.Store == nil {
		return Outputs{}, objects.NoStore()
	}
	fingerprint, err := checkpoint.Fingerprint(in.With)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	for _, seg := range []string{in.Pipeline, in.RunID, in.Node} {
		if err := s3store.ValidateKey(seg); err != nil || strings.Contains(seg, "/") {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "cannot train for pipeline %q, run %q, node %q: each must be a single key segment", in.Pipeline, in.RunID, in.Node)
		}
	}
	r := &trainRun{
		t: t, in: in, w: w,
		log:    t.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node, "trainer", w.Trainer),
		prefix: fmt.Sprintf("checkpoints/%s/%s/%s/%s/", in.Pipeline, in.RunID, in.Node, fingerprint),
		guard:  trainer.Guard{MaxEmbNorm: w.MaxEmbNorm},
	}
	if w.Trainer == CommandTrainer {
		return r.command(ctx)
	}
	return r.builtin(ctx)
}

// record adds a progress point to the curve and heartbeats it.
func (r *trainRun) record(ctx context.Context, p trainer.Progress) {
	r.addPoint(p)
	r.beat(ctx, p.Step, p.CheckpointURI)
}

func (r *trainRun) addPoint(p trainer.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.curve = append(r.curve, CurvePoint{Step: p.Step, Loss: p.Loss, EmbMaxNorm: p.EmbMaxNorm, ExamplesPerSec: p.ExamplesPerSec})
	if len(r.curve) > maxCurvePoints {
		r.curve = thin(r.curve)
	}
}

// beat heartbeats the latest step and, if one was saved there, checkpoint.
func (r *trainRun) beat(ctx context.Context, step int64, ckpt string) {
	r.mu.Lock()
	r.last.Step = step
	if ckpt != "" {
		r.last.Checkpoint, r.last.CheckpointStep = ckpt, step
	}
	hb := r.last
	r.mu.Unlock()
	nodetype.RecordProgress(ctx, hb)
}

// thin halves a curve, keeping its last point.
func thin(c []CurvePoint) []CurvePoint {
	out := c[:0]
	for i := range c {
		if i%2 == 0 || i == len(c)-1 {
			out = append(out, c[i])
		}
	}
	return out
}

// saveCurve stores the curve so far; a resumed attempt continues it.
func (r *trainRun) saveCurve(ctx context.Context) (string, error) {
	r.mu.Lock()
	curve := append([]CurvePoint(nil), r.curve...)
	r.mu.Unlock()
	if err := objects.PutJSON(ctx, r.t.Store, r.curveKey(), curve); err != nil {
		return "", fmt.Errorf("save the loss curve: %w", err)
	}
	return objects.KeyURI(r.t.Store, r.curveKey()), nil
}

// storedCurve returns the curve an earlier attempt saved, if any.
func (r *trainRun) storedCurve(ctx context.Context) []CurvePoint {
	var curve []CurvePoint
	if err := objects.GetJSON(ctx, r.t.Store, r.curveKey(), &curve); err != nil {
		return nil
	}
	return curve
}

// prepend puts the points of an earlier attempt up to step before the
// curve recorded so far.
func (r *trainRun) prepend(prior []CurvePoint, upTo int64) {
	var head []CurvePoint
	for _, p := range prior {
		if p.Step <= upTo {
			head = append(head, p)
		}
	}
	r.mu.Lock()
	r.curve = append(head, r.curve...)
	r.mu.Unlock()
}

// loadCurve restores the curve of an earlier attempt up to step.
func (r *trainRun) loadCurve(ctx context.Context, upTo int64) {
	r.prepend(r.storedCurve(ctx), upTo)
}

// earlier returns the progress an earlier attempt heartbeated, if any.
func earlier(ctx context.Context) (TrainProgress, bool) {
	var p TrainProgress
	if !activity.HasHeartbeatDetails(ctx) || activity.GetHeartbeatDetails(ctx, &p) != nil {
		return TrainProgress{}, false
	}
	return p, true
}

func divergence(err error) error {
	var div *trainer.DivergenceError
	if errors.As(err, &div) {
		return nodetype.Permanent(errtype.Diverged, "%v", err)
	}
	return err
}

// builtin trains with the trainer package, checkpointing to the store.
func (r *trainRun) builtin(ctx context.Context) (Outputs, error) {
	w := r.w
	store := r.t.Store
	sd, err := split.Open(ctx, store, w.Data)
	if err != nil {
		return Outputs{}, err
	}
	schema := sd.Outputs.Schema
	dense, sparse := w.Dense, w.Sparse
	if dense == nil && sparse == nil {
		dense, sparse = schema.Dense(), schema.Sparse()
	}
	transforms := make([]trainer.Transform, len(dense))
	for name, s := range w.Transforms {
		i := indexOf(dense, name)
		if i < 0 {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "transforms: %s is not a dense feature (%v)", name, dense)
		}
		if err := transforms[i].UnmarshalText([]byte(s)); err != nil {
			return Outputs{}, nodetype.Permanent(errtype.BadInput, "transforms: %s: %v", name, err)
		}
	}
	data, err := sd.Load(ctx, store, split.TrainDataset)
	if err != nil {
		return Outputs{}, err
	}
	examples, err := data.Examples(dense, sparse)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}

	cfg := trainer.Config{
		Model: trainer.ModelConfig{
			Dense: dense, Transforms: transforms, Sparse: sparse, Buckets: w.Buckets, Dim: w.Dim,
		},
		// Seed 0 has always trained as seed 1.
		Seed:            max(w.Seed, 1),
		Workers:         w.Workers,
		BatchSize:       w.BatchSize,
		Steps:           w.Steps,
		LearningRate:    w.LearningRate,
		L2:              w.L2,
		CheckpointEvery: w.CheckpointEvery,
		Guard:           r.guard,
	}
	tr, err := trainer.New(cfg)
	if err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	ck := &s3Checkpointer{store: store, prefix: r.prefix + "training/", keep: 2}
	if hb, ok := earlier(ctx); ok {
		r.log.Info("retried attempt; resuming from the latest checkpoint", "heartbeat_step", hb.Step, "heartbeat_checkpoint", hb.Checkpoint)
	}
	src := trainer.NewMemorySource(examples, cfg.Seed, w.Epochs)
	// An earlier attempt's curve, continued from the step training
	// resumes at (known only once Run has restored its checkpoint).
	prior := r.storedCurve(ctx)
	continued := false
	cont := func(resumed int64) {
		if !continued {
			continued = true
			r.prepend(prior, resumed)
		}
	}
	res, err := tr.Run(ctx, src, ck, func(p trainer.Progress) {
		cont(p.Step - 1)
		r.record(ctx, p)
		if p.CheckpointURI != "" {
			if _, err := r.saveCurve(ctx); err != nil {
				r.log.Warn("cannot save the loss curve", "error", err)
			}
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return Outputs{}, ctx.Err()
		}
		return Outputs{}, divergence(err)
	}
	cont(res.ResumedFrom)
	if res.ResumedFrom > 0 {
		r.log.Info("resumed training", "from_step", res.ResumedFrom, "checkpoint", res.Checkpoint)
	}

	var model bytes.Buffer
	if _, err := tr.Model().WriteTo(&model); err != nil {
		return Outputs{}, fmt.Errorf("encode the model: %w", err)
	}
	if _, err := store.Put(ctx, r.modelPrefix()+ModelFile, bytes.NewReader(model.Bytes())); err != nil {
		return Outputs{}, fmt.Errorf("upload the model: %w", err)
	}
	curveURI, err := r.saveCurve(ctx)
	if err != nil {
		return Outputs{}, err
	}
	r.log.Info("trained", "steps", res.Step, "resumed_from", res.ResumedFrom, "examples", res.Examples, "loss", res.Loss)
	return Outputs{
		Trainer:      BuiltinTrainer,
		ModelURI:     objects.KeyURI(store, r.modelPrefix()),
		Steps:        res.Step,
		ResumedFrom:  res.ResumedFrom,
		Examples:     &res.Examples,
		Loss:         finite(res.Loss),
		LossCurveURI: curveURI,
		Checkpoint:   res.Checkpoint,
		TrainRows:    int64(len(examples)),
	}, nil
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// FiniteOrNil keeps non-finite figures out of outputs: JSON cannot carry
// them, and a missing figure reads better than a made-up one.
func FiniteOrNil(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// finite is f as an output: nil when it is not finite (see FiniteOrNil).
func finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// resumePoint is where a command trainer resumes: recorded in the store at
// every checkpoint, and heartbeated.
func (r *trainRun) resumeKey() string { return r.prefix + "command/resume.json" }

// command runs the user's trainer program.
func (r *trainRun) command(ctx context.Context) (out Outputs, err error) {
	w := r.w
	store := r.t.Store
	sd, err := split.Open(ctx, store, w.Data)
	if err != nil {
		return Outputs{}, err
	}
	scratch, err := os.MkdirTemp("", "retrain-train-")
	if err != nil {
		return Outputs{}, err
	}
	defer os.RemoveAll(scratch)
	env := trainer.Env{
		TrainData:     filepath.Join(scratch, "data", split.TrainDataset),
		EvalData:      filepath.Join(scratch, "data", split.EvalDataset),
		CheckpointURI: filepath.Join(scratch, "checkpoints"),
		ModelOut:      filepath.Join(scratch, "model"),
	}
	for _, d := range []string{env.CheckpointURI, env.ModelOut} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Outputs{}, err
		}
	}
	if err := sd.Download(ctx, store, split.TrainDataset, env.TrainData); err != nil {
		return Outputs{}, err
	}
	if err := sd.Download(ctx, store, split.EvalDataset, env.EvalData); err != nil {
		return Outputs{}, err
	}

	// Resume from the furthest of what the last attempt heartbeated and
	// what it recorded in the store (a heartbeat can be lost with the
	// worker; the record cannot be newer than the checkpoint it names).
	var resume TrainProgress
	if hb, ok := earlier(ctx); ok && hb.Checkpoint != "" {
		resume = TrainProgress{Step: hb.CheckpointStep, Checkpoint: hb.Checkpoint, CheckpointStep: hb.CheckpointStep}
	}
	var stored TrainProgress
	if err := objects.GetJSON(ctx, store, r.resumeKey(), &stored); err == nil && stored.CheckpointStep > resume.CheckpointStep {
		resume = stored
	}
	if resume.Checkpoint != "" {
		local, err := r.fetchCheckpoint(ctx, resume.Checkpoint, scratch)
		if err != nil {
			return Outputs{}, fmt.Errorf("fetch the checkpoint to resume from: %w", err)
		}
		env.ResumeFrom = local
		r.last = resume
		r.loadCurve(ctx, resume.CheckpointStep)
		r.log.Info("resuming the trainer from its last checkpoint", "step", resume.CheckpointStep, "checkpoint", resume.Checkpoint)
	}

	// The node's env is appended last, after the trainer's and the GPU lease's, so
	// it overrides them.
	cmd := process.Command(r.in, w.Argv, w.Dir, nil)
	cmd.Env = append(cmd.Env, env.Environ()...)

	if w.GPUs > 0 {
		if r.t.GPUs == nil {
			return Outputs{}, nodetype.Permanent(errtype.NoGPUs, "node asks for %d GPUs, but this worker has none: run it on the GPU queue (queue: retrain-gpu) served by `retrain worker --gpu`", w.GPUs)
		}
		r.log.Info("waiting for GPUs", "gpus", w.GPUs)
		lease, err := r.t.GPUs.Acquire(ctx, w.GPUs)
		if err != nil {
			if errors.Is(err, gpu.ErrInsufficientGPUs) {
				// Another worker may have more; this one never will.
				return Outputs{}, fmt.Errorf("node asks for %d GPUs: %w", w.GPUs, err)
			}
			return Outputs{}, err
		}
		defer lease.Release()
		cmd.Env = append(cmd.Env, lease.Env()...)
		r.log.Info("GPUs leased", "visible_devices", lease.VisibleDevices())
		if r.t.Monitor != nil {
			cfg := r.t.SamplerConfig
			cfg.OnIdle = func(iw gpu.IdleWarning) {
				r.log.Warn("GPU idle while the trainer runs: is it waiting on input or the network?", "uuid", iw.UUID, "since", iw.Since, "samples", iw.Samples)
			}
			if sampler, err := gpu.StartSampler(ctx, r.t.Monitor, lease.UUIDs(), cfg); err == nil {
				defer func() { out.GPU = gpuUsage(sampler.Stop()) }()
			}
		}
	} else if r.t.GPUs != nil {
		// A job that asked for no GPU must not grab one another job leased.
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES=")
	}
	cmd.Env = append(cmd.Env, EnvGPUs+"="+strconv.Itoa(w.GPUs))
	for k, v := range w.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}

	res, err := r.runProgram(ctx, cmd, scratch)
	if err != nil {
		return Outputs{}, err
	}
	n, err := objects.UploadDir(ctx, store, env.ModelOut, r.modelPrefix())
	if err != nil {
		return Outputs{}, fmt.Errorf("upload the model from %s: %w", trainer.EnvModelOut, err)
	}
	if n == 0 {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "the trainer wrote no model files to %s", trainer.EnvModelOut)
	}
	curveURI, err := r.saveCurve(ctx)
	if err != nil {
		return Outputs{}, err
	}
	r.mu.Lock()
	last := r.last
	r.mu.Unlock()
	// GPU, if sampled, is set on the way out, once the sampler stops.
	return Outputs{
		Trainer:      CommandTrainer,
		ModelURI:     objects.KeyURI(store, r.modelPrefix()),
		Steps:        last.Step,
		ResumedFrom:  resume.CheckpointStep,
		Loss:         finite(res.loss),
		LossCurveURI: curveURI,
		Checkpoint:   last.Checkpoint,
		TrainRows:    sd.Outputs.TrainRows,
		GPUs:         w.GPUs,
	}, nil
}

func gpuUsage(s gpu.Summary) *GPUUsage {
	return &GPUUsage{
		Samples: s.Samples, MeanUtilization: s.MeanUtilization, MaxUtilization: s.MaxUtilization,
		IdleGPUs: s.IdleGPUs, IdleWarnings: len(s.Warnings),
	}
}

type programResult struct{ loss float64 }

// runProgram runs the trainer program in its own process group, reading
// its progress lines: each is checked by the divergence guard, added to
// the curve and heartbeated, and each checkpoint it announces is copied to
// the store so that a retry anywhere can resume from it. Cancellation, a
// timeout or the guard kill the whole group.
func (r *trainRun) runProgram(ctx context.Context, cmd *exec.Cmd, scratch string) (programResult, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return programResult{}, err
	}
	stderr := process.NewTailWriter(process.OutputTail, r.log, "stderr")
	cmd.Stdout, cmd.Stderr = pw, stderr
	process.SetProcessGroup(cmd)
	r.log.Info("trainer starting", "argv", r.w.Argv)
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return programResult{}, nodetype.Permanent(errtype.BadInput, "start %q: %v", r.w.Argv[0], err)
	}
	pw.Close() // the child holds the write end now; EOF comes when it is gone

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		res      programResult
		eventErr error
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		eventErr = trainer.ReadEvents(pr, func(e trainer.Event) error {
			if e.Kind != trainer.ProgressEvent {
				r.log.Info("output", "stream", "stdout", "line", e.Line)
				return nil
			}
			if err := r.guard.CheckEvent(e); err != nil {
				return err
			}
			p := e.Progress
			if e.Has(trainer.FieldLoss) {
				res.loss = p.Loss
				r.addPoint(p) // before the checkpoint, which saves the curve up to its step
			}
			if p.CheckpointURI != "" {
				uri, err := r.storeCheckpoint(pctx, p.CheckpointURI, p.Step)
				if err != nil {
					r.log.Warn("cannot keep the trainer's checkpoint; a retry resumes from an earlier one", "checkpoint", p.CheckpointURI, "error", err)
					uri = ""
				}
				p.CheckpointURI = uri
			}
			r.beat(pctx, p.Step, p.CheckpointURI)
			return nil
		})
		if eventErr != nil {
			cancel() // the guard tripped: stop the program
			_, _ = io.Copy(io.Discard, pr)
		}
		pr.Close()
	}()
	waitErr := process.WaitOrKill(pctx, cmd, r.log)
	<-done
	stderr.Flush()

	if eventErr != nil {
		if errors.As(eventErr, new(*trainer.DivergenceError)) {
			return res, divergence(eventErr)
		}
		return res, fmt.Errorf("read the trainer's output: %w", eventErr)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		if code < 0 {
			return res, fmt.Errorf("%s: %v; stderr: %s", r.w.Argv[0], waitErr, process.LastLines(stderr.Tail(), 5))
		}
		return res, fmt.Errorf("%s exited with code %d; stderr: %s", r.w.Argv[0], code, process.LastLines(stderr.Tail(), 5))
	}
	return res, nil
}

// storeCheckpoint copies a checkpoint the program wrote locally (a file or
// a folder) to the store and records it as the point to resume from. A
// URI the program wrote itself (s3://, gs://) is recorded as it is.
func (r *trainRun) storeCheckpoint(ctx context.Context, ckpt string, step int64) (string, error) {
	uri := ckpt
	if !strings.Contains(ckpt, "://") {
		st, err := os.Stat(ckpt)
		if err != nil {
			return "", err
		}
		prefix := fmt.Sprintf("%scommand/step-%012d/", r.prefix, step)
		if st.IsDir() {
			if _, err := objects.UploadDir(ctx, r.t.Store, ckpt, prefix); err != nil {
				return "", err
			}
			uri = objects.KeyURI(r.t.Store, prefix)
		} else {
			f, err := os.Open(ckpt)
			if err != nil {
				return "", err
			}
			defer f.Close()
			key := prefix + filepath.Base(ckpt)
			if _, err := r.t.Store.Put(ctx, key, f); err != nil {
				return "", err
			}
			uri = objects.KeyURI(r.t.Store, key)
		}
	}
	if err := objects.PutJSON(ctx, r.t.Store, r.resumeKey(), TrainProgress{Step: step, Checkpoint: uri, CheckpointStep: step}); err != nil {
		return "", err
	}
	if _, err := r.saveCurve(ctx); err != nil {
		r.log.Warn("cannot save the loss curve", "error", err)
	}
	return uri, nil
}

// fetchCheckpoint makes a stored checkpoint local for the program: a
// folder (URI ending in /) or a file of this store is downloaded under
// scratch; any other URI is passed on for the program to read.
func (r *trainRun) fetchCheckpoint(ctx context.Context, uri, scratch string) (string, error) {
	key, err := objects.StoreKey(r.t.Store, uri)
	if err != nil {
		return uri, nil // not ours: the program wrote it and can read it
	}
	dir := filepath.Join(scratch, "resume")
	if strings.HasSuffix(key, "/") {
		if _, err := objects.DownloadPrefix(ctx, r.t.Store, key, dir); err != nil {
			return "", err
		}
		return dir, nil
	}
	local := filepath.Join(dir, filepath.Base(key))
	return local, objects.DownloadFile(ctx, r.t.Store, key, local)
}

// Deps are what the train node type needs from the worker.
type Deps struct {
	Store   *s3store.Store
	Logger  *slog.Logger
	GPUs    *gpu.Allocator
	Monitor gpu.UtilizationReader
}

// Type returns the train node type.
func Type(d Deps) nodetype.Type {
	t := &Trainers{Store: d.Store, Logger: d.Logger, GPUs: d.GPUs, Monitor: d.Monitor}
	return t.Type()
}
