package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"

	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/internal/dataset"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

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
	schema := sd.Record.Schema
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
	if err := schema.HasFeatures(dense, sparse); err != nil {
		return Outputs{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}

	cfg := trainer.Config{
		Model: trainer.ModelConfig{
			Dense: dense, Transforms: transforms, Sparse: sparse, Buckets: w.Buckets, Dim: w.Dim,
		},
		// Every seed is its own, 0 included (it trained as 1 before 0.10).
		Seed:            w.Seed,
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
	// The split is streamed once into chunk files on local disk, and the
	// epochs read them a chunk at a time: memory stays bounded by the
	// chunk, not the table (see dataset.SpillSource for the order).
	src, err := spillSplit(ctx, sd, store, dense, sparse, cfg.Seed, w.Epochs)
	if err != nil {
		return Outputs{}, err
	}
	defer src.Close()
	r.log.Info("split spilled to local chunks", "rows", src.Rows(), "chunks", src.Chunks())
	r.setTotal(totalSteps(src.Rows(), w.Epochs, cfg.BatchSize, w.Steps))
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
		TrainRows:    src.Rows(),
	}, nil
}

// spillSplit streams the split's training rows into a spill and returns
// the source over it.
func spillSplit(ctx context.Context, sd *split.Data, store *s3store.Store, dense, sparse []string, seed uint64, epochs int64) (*dataset.SpillSource, error) {
	sp, err := dataset.NewSpill(dataset.SpillConfig{Dense: dense, Sparse: sparse, Rows: sd.Rows(split.TrainDataset)})
	if err != nil {
		return nil, err
	}
	err = sd.Batches(ctx, store, split.TrainDataset, sp.Add)
	if err != nil {
		sp.Close()
		return nil, err
	}
	return sp.Source(seed, epochs, sd.Record.Schema.RequestID != "")
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// totalSteps is the step the builtin trainer ends at: a step takes one
// global batch from the epochs read back to back (a batch may span two
// epochs), and steps, when set, stops it sooner.
func totalSteps(rows, epochs int64, batch int, steps int64) int64 {
	if batch < 1 {
		batch = 1024 // trainer.Config's default
	}
	total := (rows*max(epochs, 1) + int64(batch) - 1) / int64(batch)
	if steps > 0 && steps < total {
		return steps
	}
	return total
}
