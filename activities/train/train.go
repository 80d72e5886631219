package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split"

	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/internal/number"
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

// doc is the train node type's description.
const doc = "Train a candidate model on a split (${nodes.split.outputs.uri}): the builtin pure-Go CTR trainer (hashed factorization machine, " +
	"synchronous data-parallel Adagrad), or a command (your trainer program, e.g. examples/torch/train.py) that follows retrain's trainer contract, run once or as `processes` ranks that the node starts and supervises (torch.distributed's env://), reading the split as Parquet or npy. " +
	"The builtin trainer streams the split once into chunk files on the worker's local disk (its temp folder; about 100 bytes a row with ten features) and trains a chunk of at most 512Ki rows at a time, so its memory does not grow with the split. " +
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
	Seed            uint64            `json:"seed" trainer:"builtin" default:"1" doc:"builtin: seed of the initial weights and the shuffle; every value is a seed of its own, 0 included"`
	Workers         int               `json:"workers" trainer:"builtin" doc:"builtin: goroutines computing gradients in lockstep (default: the CPUs); does not change the result"`
	CheckpointEvery int64             `json:"checkpoint_every" trainer:"builtin" default:"50" doc:"builtin: steps between checkpoints"`

	Argv []string          `json:"argv" trainer:"command" doc:"command: the trainer program and its arguments (no shell unless argv names one)"`
	Env  map[string]string `json:"env" trainer:"command" doc:"command: extra environment (the worker's own is not inherited beyond PATH, HOME, locale and --pass-env); values may hold ${secret.NAME}"`
	Dir  string            `json:"dir" trainer:"command" doc:"command: working directory"`
	GPUs int               `json:"gpus" trainer:"command" doc:"command: GPUs to lease on the worker (CUDA_VISIBLE_DEVICES, RETRAIN_GPUS); run the node on the GPU queue"`
	// Processes has no default tag: its default depends on gpus and argv.
	Processes  int    `json:"processes" trainer:"command" doc:"command: ranks of argv the node starts and supervises, each with MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE (torch.distributed's env://); only rank 0's stdout is read for progress, and a rank that fails stops the others (default: gpus when above 0 and argv does not run torchrun, else 1)"`
	DataFormat string `json:"data_format" trainer:"command" default:"parquet" doc:"command: how RETRAIN_TRAIN_DATA and RETRAIN_EVAL_DATA are written: parquet (the split's files) or npy (NumPy arrays and schema.json, which numpy.load reads without other libraries)"`
	// Hosts has no default tag: 1 and absent are the same node.
	Hosts        int    `json:"hosts" trainer:"command" doc:"command: hosts the node spans: processes ranks on each of this many workers of its queue with distinct --host-id (WORLD_SIZE = hosts x processes, NODE_RANK, MASTER_ADDR on host 0's advertised address), started once every host holds its GPUs and stopped together when one fails; a retry forms a new gang that resumes from the last checkpoint (default 1)"`
	GangTimeout  string `json:"gang_timeout" trainer:"command" type:"duration" default:"10m" doc:"command: with hosts above 1, how long the hosts may take to join (each holding its GPUs) before every lease is released and the attempt fails, naming how many joined"`
	ShardData    bool   `json:"shard_data" trainer:"command" doc:"command: give each rank only its share of the training rows (RETRAIN_TRAIN_DATA is that share; RETRAIN_SHARD_INDEX, RETRAIN_SHARD_COUNT, RETRAIN_SHARD_ROWS, RETRAIN_SHARD_MIN_ROWS, RETRAIN_GLOBAL_ROWS, RETRAIN_SHARD_EPOCH name it), each host reading from the store only its ranks' row groups (ranged reads; whole files for a split whose manifest records no row groups); the shares are disjoint, their union is every training row once, and they are whole row groups within one of the even share where the row groups allow (else row ranges within one row); RETRAIN_EVAL_DATA is given on rank 0's host only; the outputs say per host the bytes read, files, local disk peak and time to the first step; the node's checkpoint folder leaves hosts, processes and gpus out, so the run started again under its id with another world size resumes from its checkpoint, and when that checkpoint's progress line said where the ranks stood (shard_epoch, shard_done) its ranks get the rest of the interrupted epoch (RETRAIN_SHARD_REST_DATA and the RETRAIN_SHARD_REST_* figures) to train first, so that no row of that epoch is trained twice or skipped"`
	StreamData   bool   `json:"stream_data" trainer:"command" doc:"command: with shard_data, start the trainer before its share is local: each piece of its RETRAIN_TRAIN_DATA (and rest), a Parquet file (or with data_format npy an npy folder of its own), appears whole, named in its share's order, as its row group arrives, every rank's first ones first, then a file .complete (RETRAIN_SHARD_STREAM=1, RETRAIN_SHARD_FILES the pieces to expect); the first step waits for the first row groups, not the host's last"`
	StreamWindow int    `json:"stream_window" trainer:"command" doc:"command: with stream_data, the most pieces (Parquet files or npy folders) each of a rank's folders holds at once (0: no bound): the host writes a rank's next piece only once the trainer has removed one it read (RETRAIN_SHARD_WINDOW says so, and the trainer must remove each piece once read), so a host's disk holds a window of its ranks' shares rather than all of them; a retry reads again from the store the pieces removed"`
	HangTimeout  string `json:"hang_timeout" trainer:"command" type:"duration" default:"10m" doc:"command: a rank whose progress lines stop advancing its step for this long stops every rank and fails the attempt, naming the rank (and host); counted from its first progress line, so startup is not included (0s: never)"`
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
	// Hosts are a gang's hosts (hosts > 1), in rank order, with their
	// addresses, ranks and pace; SlowestHost names the one below 0.8x the
	// median pace, if any. Restarts counts the gangs formed again after a
	// failure, and Attempts says each one's hosts and how it ended.
	Hosts       []HostOutput  `json:"hosts,omitempty"`
	SlowestHost string        `json:"slowest_host,omitempty"`
	Restarts    int           `json:"restarts,omitempty"`
	Attempts    []GangAttempt `json:"attempts,omitempty"`
	// Data is what this worker (a gang's host 0) read of the training
	// data for its ranks: their shares with shard_data, else the whole
	// split (a command trainer's).
	Data    *DataRead `json:"data,omitempty"`
	Summary string    `json:"summary"` // one line for the run's node table
}

// summary says what an attempt trained, e.g. "trained 2 epochs, 44
// steps on 28,572 rows, loss 0.386, 0.69 s (builtin)".
func (o Outputs) summary(w With, took time.Duration) string {
	s := "trained "
	if o.Trainer != CommandTrainer && w.Epochs > 0 {
		s += fmt.Sprintf("%d epochs, ", w.Epochs)
	}
	s += fmt.Sprintf("%s steps", number.Count(o.Steps))
	if o.TrainRows > 0 {
		s += " on " + number.Count(o.TrainRows) + " rows"
	}
	if o.Loss != nil {
		s += fmt.Sprintf(", loss %.3f", *o.Loss)
	}
	if o.ResumedFrom > 0 {
		s += fmt.Sprintf(", resumed from step %d", o.ResumedFrom)
	}
	if o.GPUs > 0 {
		s += fmt.Sprintf(", %d GPUs", o.GPUs) // per host, on a gang's
	}
	return s + fmt.Sprintf(", %s (%s)", took.Round(10*time.Millisecond), o.Trainer)
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
	if n, ok := with["hosts"].(float64); ok && n > 1 && kind == BuiltinTrainer {
		return fmt.Errorf("hosts %v: the builtin trainer is one process on one worker; train across hosts with trainer: command", n)
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
	if f, ok := with["data_format"].(string); ok && !dags.HasRef(f) && f != split.FormatParquet && f != split.FormatNPY {
		return fmt.Errorf("data_format %q: want %s or %s", f, split.FormatParquet, split.FormatNPY)
	}
	for _, f := range []string{"gang_timeout", "hang_timeout"} {
		if v, ok := with[f].(string); ok && !dags.HasRef(v) {
			d, err := dags.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s: %v", f, err)
			}
			if d < 0 || (f == "gang_timeout" && d == 0) {
				return fmt.Errorf("%s %s: want a positive duration", f, v)
			}
		}
	}
	n, _ := with["processes"].(float64)
	hosts, _ := with["hosts"].(float64)
	shardData, _ := with["shard_data"].(bool)
	if stream, _ := with["stream_data"].(bool); stream {
		if sd, ok := with["shard_data"].(bool); ok && !sd || !ok && !dags.HasRef(with["shard_data"]) {
			return errors.New("stream_data: needs shard_data: true (the stream is of each rank's share)")
		}
	}
	if v, ok := with["stream_window"]; ok && !dags.HasRef(v) {
		n, isNum := v.(float64)
		if i, isInt := v.(int); isInt {
			n, isNum = float64(i), true
		}
		if !isNum || n != math.Trunc(n) || n < 0 || n > 1<<20 {
			return fmt.Errorf("stream_window %v: want a whole number of pieces from 0 (no bound) to %d", v, 1<<20)
		}
		if stream, _ := with["stream_data"].(bool); n > 0 && !stream && !dags.HasRef(with["stream_data"]) {
			return errors.New("stream_window: bounds the pieces of a stream; give it with stream_data: true")
		}
	}
	if n > 1 || hosts > 1 || shardData {
		var words []string
		switch argv := with["argv"].(type) {
		case []string:
			words = argv
		case []any:
			for _, a := range argv {
				if s, ok := a.(string); ok {
					words = append(words, s)
				}
			}
		}
		if launchesRanks(words) {
			if shardData {
				return errors.New("shard_data: argv runs torchrun, whose ranks the node does not start and so cannot give each its share; give the trainer program in argv and set processes")
			}
			if hosts > 1 {
				return fmt.Errorf("hosts %v: argv runs torchrun, which starts its ranks itself and would rendezvous on its own; give the trainer program in argv and let the node start the ranks on every host", hosts)
			}
			return fmt.Errorf("processes %v: argv runs torchrun, which starts the ranks itself; leave processes out (or 1)", n)
		}
	}
	for _, f := range []string{"epochs", "batch_size", "workers", "checkpoint_every", "buckets", "processes", "hosts"} {
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
	// AllowCommands are the programs this worker's operator lets command
	// trainers start (its --allow-commands); empty allows any.
	AllowCommands []string
	// Env is what command trainers see of the worker: its environment
	// and secrets.
	Env progenv.Policy
	// Host is this worker as a host of gangs (hosts > 1): its id and the
	// address the other hosts' ranks reach its ranks on. Hosts lists the
	// live hosts polling a queue; nil on a worker that cannot.
	Host  Host
	Hosts HostDirectory
	// Limits bound what one node may ask of this worker as a host: ranks
	// per host and hosts per gang (the worker's --max-processes-per-host
	// and --max-hosts). The zero Limits bounds nothing.
	Limits gang.Limits

	held heldLeases // the GPUs this worker holds for gangs it joined (gangrun.go)
}

// Type is the train node type, run by t. A node with hosts > 1 runs as
// the Gang workflow instead, which forms the gang through its activities.
func (t *Trainers) Type() nodetype.Type {
	nt := nodetype.New(dags.NodeType{Name: "train", Doc: doc, Check: t.check,
		Hosts: &dags.Hosts{Field: "hosts", Workflow: GangWorkflow}}, t.train)
	nt.Workflows = map[string]any{GangWorkflow: Gang}
	nt.Activities = map[string]any{
		GangHostsActivity:   t.GangHosts,
		GangLeaseActivity:   t.GangLease,
		GangReleaseActivity: t.GangRelease,
		GangRunActivity:     t.GangRun,
		GangShardsActivity:  t.GangShards,
	}
	nt.Hosted = []string{GangLeaseActivity, GangReleaseActivity, GangRunActivity}
	return nt
}

// Run runs one attempt of a train node, as t.Type() does.
func (t *Trainers) Run(ctx context.Context, in nodetype.Input) (map[string]any, error) {
	return t.Type().Run(ctx, in)
}

// trainRun is one attempt of a train node.
type trainRun struct {
	t      *Trainers
	in     nodetype.Input
	w      With
	log    *slog.Logger
	prefix string // checkpoints/P/R/N/F/: this node's folder for its inputs
	guard  trainer.Guard
	// secrets are the values of the secrets the trainer's env holds,
	// masked in its logged output and stderr tail.
	secrets []string

	// watch follows the ranks' steps; hangTimeout is how long one may
	// stand still (0: never checked).
	watch       *gang.Watch
	hangTimeout time.Duration
	procs       map[int]rankProc // the ranks this worker started, by global rank (mu)
	// rankEnv is each rank's own environment (its share of the data,
	// with shard_data), by global rank; nil: none.
	rankEnv func(rank int) []string
	// shards is this host's part of the shares, with shard_data: where a
	// checkpoint stands in them is recorded with it.
	shards *shardPlan
	// firstStep is when the first progress line came (mu).
	firstStep time.Time

	mu    sync.Mutex
	curve []CurvePoint
	last  TrainProgress
}

func (r *trainRun) curveKey() string    { return r.prefix + "training/curve.json" }
func (r *trainRun) modelPrefix() string { return r.prefix + "model/" }

// train runs one attempt of a train node.
func (t *Trainers) train(ctx context.Context, in nodetype.Input, _ With) (Outputs, error) {
	// The schema checked the types; the rules across fields are checked
	// again here on the resolved block.
	r, w, err := t.newRun(in)
	if err != nil {
		return Outputs{}, err
	}
	if err := t.checkLimits(processCount(w), processWhy(w), 1); err != nil {
		return Outputs{}, err
	}
	started := time.Now()
	var out Outputs
	if w.Trainer == CommandTrainer {
		out, err = r.command(ctx, nil)
	} else {
		out, err = r.builtin(ctx)
	}
	if err != nil {
		return Outputs{}, err
	}
	out.Summary = out.summary(w, time.Since(started))
	return out, nil
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

// Deps are what the train node type needs from the worker.
type Deps struct {
	Store   *s3store.Store
	Logger  *slog.Logger
	GPUs    *gpu.Allocator
	Monitor gpu.UtilizationReader
	// AllowCommands: see Trainers.AllowCommands.
	AllowCommands []string
	Env           progenv.Policy // see Trainers.Env
	Host          Host           // see Trainers.Host
	Hosts         HostDirectory  // see Trainers.Hosts
	Limits        gang.Limits    // see Trainers.Limits
}

// Type returns the train node type.
func Type(d Deps) nodetype.Type {
	t := &Trainers{Store: d.Store, Logger: d.Logger, GPUs: d.GPUs, Monitor: d.Monitor, AllowCommands: d.AllowCommands, Env: d.Env, Host: d.Host, Hosts: d.Hosts, Limits: d.Limits}
	return t.Type().WithCache(t.cache())
}
