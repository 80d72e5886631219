package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/internal/process"
	"github.com/retrain-ml/retrain/activities/progenv"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// resumeKey is where a command trainer resumes from: the point is recorded
// in the store at every checkpoint, and heartbeated.
func (r *trainRun) resumeKey() string { return r.prefix + "command/resume.json" }

// command runs the user's trainer program.
func (r *trainRun) command(ctx context.Context) (out Outputs, err error) {
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
	for _, ds := range [][2]string{{split.TrainDataset, env.TrainData}, {split.EvalDataset, env.EvalData}} {
		if err := sd.Localize(ctx, store, ds[0], ds[1], w.DataFormat); err != nil {
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
	cmd.Env = append(cmd.Env, nodeEnv.Vars...)

	res, err := r.runProgram(ctx, cmd, processCount(w))
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
		TrainRows:    sd.Record.TrainRows,
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

// runProgram runs the trainer program, as one process or as n ranks (see
// ranks.go), each in its own process group, reading its progress lines
// (rank 0's): each is checked by the divergence guard, added to the curve
// and heartbeated, and each checkpoint it announces is copied to the
// store so that a retry anywhere can resume from it. Cancellation, a
// timeout or the guard kill every process group; so does a rank that
// fails.
func (r *trainRun) runProgram(ctx context.Context, cmd *exec.Cmd, n int) (programResult, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return programResult{}, err
	}
	var wait func(context.Context) error
	if n == 1 {
		wait, err = r.startOne(cmd, pw)
	} else {
		wait, err = r.startRanks(cmd, n, pw)
	}
	pw.Close() // the children hold the write end now; EOF comes when they are gone
	if err != nil {
		pr.Close()
		return programResult{}, err
	}

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		res      programResult
		eventErr error
		done     = make(chan struct{})
		mask     = progenv.NewMasker(r.secrets) // once, not per line
	)
	go func() {
		defer close(done)
		eventErr = trainer.ReadEvents(pr, func(e trainer.Event) error {
			if e.Kind != trainer.ProgressEvent {
				r.log.Info("output", "stream", "stdout", "line", mask.String(e.Line))
				return nil
			}
			if err := r.guard.CheckEvent(e); err != nil {
				return err
			}
			p := e.Progress
			if e.Has(trainer.FieldTotal) {
				r.setTotal(p.Total)
			}
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
	waitErr := wait(pctx)
	<-done

	if eventErr != nil {
		if errors.As(eventErr, new(*trainer.DivergenceError)) {
			return res, divergence(eventErr)
		}
		return res, fmt.Errorf("read the trainer's output: %w", eventErr)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, waitErr
}

// startOne starts the program as a single process writing its progress to
// stdout, and returns what waits for it: the error names its exit code
// or signal and its stderr's tail.
func (r *trainRun) startOne(cmd *exec.Cmd, stdout *os.File) (func(context.Context) error, error) {
	stderr := process.NewTailWriter(process.OutputTail, r.log, "stderr").Mask(r.secrets)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	process.SetProcessGroup(cmd)
	r.log.Info("trainer starting", "argv", r.w.Argv)
	if err := cmd.Start(); err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "start %q: %v", r.w.Argv[0], err)
	}
	return func(ctx context.Context) error {
		waitErr := process.WaitOrKill(ctx, cmd, r.log)
		stderr.Flush()
		code := cmd.ProcessState.ExitCode()
		switch {
		case code == 0:
			return nil
		case code < 0:
			return fmt.Errorf("%s: %v; stderr: %s", r.w.Argv[0], waitErr, process.LastLines(stderr.Tail(), 5))
		}
		return fmt.Errorf("%s exited with code %d; stderr: %s", r.w.Argv[0], code, process.LastLines(stderr.Tail(), 5))
	}, nil
}

// startRanks starts the program as n ranks, rank 0 writing the progress
// to stdout, and returns what waits for them all: the error is the
// *RankError of the rank that failed first.
func (r *trainRun) startRanks(cmd *exec.Cmd, n int, stdout *os.File) (func(context.Context) error, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r.log.Info("trainer starting", "argv", r.w.Argv, "ranks", n)
	g, err := startRanks(cmd, n, port, stdout, r.log, r.secrets...)
	if err != nil {
		return nil, nodetype.Permanent(errtype.BadInput, "start %q: %v", r.w.Argv[0], err)
	}
	return g.wait, nil
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
