package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/shard"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// resumeKey is where a command trainer resumes from: the point is recorded
// in the store at every checkpoint, and heartbeated.
func (r *trainRun) resumeKey() string { return r.prefix + "command/resume.json" }

// command runs the user's trainer program: on this worker alone (g is
// nil) or as host g.host of a gang, whose GPUs were leased when it joined.
// Only the gang's first host (the one of rank 0) keeps checkpoints, the
// loss curve and the model; the others run their ranks and report their
// pace.
func (r *trainRun) command(ctx context.Context, g *gangHost) (out Outputs, err error) {
	w := r.w
	// Before any data moves: a program the worker refuses never starts.
	if err := process.CheckProgram(r.t.AllowCommands, w.Argv); err != nil {
		return Outputs{}, err
	}
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
	started := time.Now()
	var (
		plan *shardPlan
		read DataRead
	)
	localize := [][2]string{{split.TrainDataset, env.TrainData}, {split.EvalDataset, env.EvalData}}
	if w.ShardData {
		world, ranks := shardRanks(w, g)
		node := r.in.Pipeline + "/" + r.in.RunID + "/" + r.in.Node
		plan, err = planShards(sd, world, ranks, node, resume.Shards)
		if errors.Is(err, shard.ErrPosition) {
			// Not a position this node wrote for this split: the shares
			// of a fresh start, as for a checkpoint that recorded none.
			r.log.Warn("the checkpoint's position in the shares does not fit the split; the ranks get their shares afresh", "error", err)
			plan, err = planShards(sd, world, ranks, node, nil)
		}
		if err != nil {
			return Outputs{}, err
		}
		if rest := plan.resumed.Rest; rest != nil {
			r.log.Info("resuming an epoch with another world size: the ranks train the rest of it first", "epoch", plan.resumed.Epoch,
				"rest_rows", rest.GlobalRows, "world", world, "stages", len(plan.resumed.Prior))
		}
		r.shards = plan
		// Each rank's RETRAIN_TRAIN_DATA is its share (rankEnv); the eval
		// data only rank 0 reads.
		env.TrainData, localize = "", localize[1:]
		if !g.primary() {
			env.EvalData, localize = "", nil
		}
		r.rankEnv = plan.env
	}
	for _, ds := range localize {
		if err := sd.Localize(ctx, store, ds[0], ds[1], w.DataFormat); err != nil {
			return Outputs{}, err
		}
	}
	if plan == nil {
		// The whole split on every host: what it read, for comparison
		// with shard_data.
		read = wholeSplitRead(sd, w, g, filepath.Join(scratch, "data", split.TrainDataset), time.Since(started))
	} else {
		plan.window = w.StreamWindow
		if plan.stream = w.StreamData; !plan.stream {
			if read, err = plan.localize(ctx, store, sd.Record.Schema, w.DataFormat); err != nil {
				return Outputs{}, err
			}
			r.logShares(read)
		}
		defer func() {
			if err == nil {
				// Kept after a failure, for a retry on this host to reuse.
				_ = os.RemoveAll(plan.root)
			}
		}()
	}
	dataRead := func() *DataRead {
		r.mu.Lock()
		defer r.mu.Unlock()
		d := read
		if !r.firstStep.IsZero() {
			d.FirstStepSeconds = r.firstStep.Sub(started).Seconds()
		}
		return &d
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
	nodeEnv, err := r.t.Env.Resolve(ctx, "env", w.Env)
	if err != nil {
		return Outputs{}, err
	}
	r.secrets = nodeEnv.Secrets
	cmd, _, err := process.CommandEnv(ctx, r.in, w.Argv, w.Dir, r.t.Env, nil)
	if err != nil {
		return Outputs{}, err
	}
	cmd.Env = append(cmd.Env, env.Environ()...)

	switch {
	case g != nil:
		if g.lease != nil {
			cmd.Env = append(cmd.Env, g.lease.Env()...)
			r.log.Info("GPUs leased for the gang", "visible_devices", g.lease.VisibleDevices())
			defer r.sampleGPUs(ctx, g.lease, &out)()
		} else if r.t.GPUs != nil {
			cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES=")
		}
	case w.GPUs > 0:
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
		defer r.sampleGPUs(ctx, lease, &out)()
	case r.t.GPUs != nil:
		// A job that asked for no GPU must not grab one another job leased.
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES=")
	}
	cmd.Env = append(cmd.Env, EnvGPUs+"="+strconv.Itoa(w.GPUs))
	cmd.Env = append(cmd.Env, nodeEnv.Vars...)

	var res programResult
	if plan != nil && plan.stream {
		res, err = r.runStreaming(ctx, cmd, processCount(w), g, plan, sd.Record.Schema, w.DataFormat, &read)
	} else {
		res, err = r.runProgram(ctx, cmd, processCount(w), g)
	}
	if err != nil {
		return Outputs{}, err
	}
	if !g.primary() {
		r.mu.Lock()
		last := r.last
		r.mu.Unlock()
		return Outputs{Trainer: CommandTrainer, Steps: last.Step, ResumedFrom: resume.CheckpointStep, TrainRows: sd.Record.TrainRows, GPUs: w.GPUs, Data: dataRead()}, nil
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
		TrainRows:    sd.Record.TrainRows,
		GPUs:         w.GPUs,
		Data:         dataRead(),
	}, nil
}

// sampleGPUs samples the utilization of the lease's GPUs while the
// trainer runs, when the worker can; the func it returns stops the
// sampler and puts the summary in out.
func (r *trainRun) sampleGPUs(ctx context.Context, lease *gpu.Lease, out *Outputs) func() {
	if r.t.Monitor == nil {
		return func() {}
	}
	cfg := r.t.SamplerConfig
	cfg.OnIdle = func(iw gpu.IdleWarning) {
		r.log.Warn("GPU idle while the trainer runs: is it waiting on input or the network?", "uuid", iw.UUID, "since", iw.Since, "samples", iw.Samples)
	}
	sampler, err := gpu.StartSampler(ctx, r.t.Monitor, lease.UUIDs(), cfg)
	if err != nil {
		return func() {}
	}
	return func() { out.GPU = gpuUsage(sampler.Stop()) }
}

func gpuUsage(s gpu.Summary) *GPUUsage {
	return &GPUUsage{
		Samples: s.Samples, MeanUtilization: s.MeanUtilization, MaxUtilization: s.MaxUtilization,
		IdleGPUs: s.IdleGPUs, IdleWarnings: len(s.Warnings),
	}
}

// storeCheckpoint copies a checkpoint the program wrote locally (a file or
// a folder) to the store and records it as the point to resume from. A
// URI the program wrote itself (s3://, gs://) is recorded as it is.
func (r *trainRun) storeCheckpoint(ctx context.Context, ckpt string, step int64, pos *shard.Position) (string, error) {
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
	if err := objects.PutJSON(ctx, r.t.Store, r.resumeKey(), TrainProgress{Step: step, Checkpoint: uri, CheckpointStep: step, Shards: pos}); err != nil {
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

// shardRanks is the world size the training rows are cut for and the
// global ranks this worker runs: a gang host's, or every rank of a node
// on one worker.
func shardRanks(w With, g *gangHost) (int, []int) {
	if g != nil {
		var ranks []int
		for local := range g.layout.Processes {
			ranks = append(ranks, g.layout.Rank(g.host, local))
		}
		return g.layout.World(), ranks
	}
	n := processCount(w)
	ranks := make([]int, n)
	for i := range ranks {
		ranks[i] = i
	}
	return n, ranks
}

// wholeSplitRead is what a host that localized the whole split (no
// shard_data) read: every file of the training data, on every host.
func wholeSplitRead(sd *split.Data, w With, g *gangHost, dir string, took time.Duration) DataRead {
	ds, _ := sd.Manifest.Dataset(split.TrainDataset)
	_, ranks := shardRanks(w, g)
	d := DataRead{Ranks: ranks, Rows: ds.Rows, Shards: len(ds.Files), DiskPeak: dirSize(dir), LocalizeSeconds: took.Seconds()}
	for _, f := range ds.Files {
		d.SplitBytes += f.Size
	}
	d.BytesRead = d.SplitBytes
	return d
}

// logShares logs what the host read for its ranks' shares.
func (r *trainRun) logShares(read DataRead) {
	r.log.Info("the ranks' shares of the training data are local", "ranks", read.Ranks, "rows", read.Rows, "rest_rows", read.RestRows, "units", read.Shards,
		"bytes_read", read.BytesRead, "split_bytes", read.SplitBytes, "reused", read.Reused, "disk_peak", read.DiskPeak, "seconds", read.LocalizeSeconds)
}
