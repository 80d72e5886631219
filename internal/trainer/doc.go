// Package trainer is retrain's builtin, pure-Go click-through-rate trainer
// and the training contract it shares with user-supplied trainer programs.
//
// It is plain Go with no workflow-engine imports: the train node wires a
// [Source] over the lake's training table and a [Checkpointer] over the
// object store into [Trainer.Run], heartbeats with each [Progress] and maps a
// [*DivergenceError] to a non-retryable failure. The evaluate node scores a
// [Model] with [Model.PredictBatch] and [Evaluate].
//
// # Model
//
// [Model] is a field-aware factorization machine over hashed ids:
//
//	score(x) = b + Σ_j w_j·x_j + Σ_f e_f[0] + Σ_{f<g} ⟨v_f, v_g⟩
//	p(x)     = sigmoid(score(x))
//
// x_j are the dense features; for each sparse feature f (user_id, ad_id, a
// list of recently clicked ads, ...) its ids are hashed with the feature's
// index into one shared table of Buckets rows (the hashing trick: no
// vocabulary to build or ship, collisions are rare when Buckets is well
// above the number of distinct ids). A row is [w, v_1..v_Dim]: a linear
// weight, which is exactly what logistic regression with hashed id weights
// would learn, and an embedding. e_f is the mean of the rows of f's ids (mean
// pooling, so a list feature is scaled like a single id; a feature with no ids
// contributes nothing), v_f its embedding part.
//
// Why a factorization machine: the linear part is the strong, well-understood
// CTR baseline (per-user and per-ad click propensities plus dense features),
// and the pairwise term adds user×ad affinity at O(F·Dim) per example via
// ½(‖Σ v_f‖² − Σ‖v_f‖²), with one embedding table and no hidden layers, so the
// gradient is a few lines and data parallelism stays exact. A two-tower model
// needs an MLP per tower for the same effect and is built for retrieval rather
// than calibrated ranking. Dim = 0 turns the pairwise term off and the model
// is logistic regression with hashed id weights. Dense features enter
// linearly, after an optional per-feature [Transform] (log of a scale, logit
// of a rate) that is part of the model, so training and every later scoring
// apply the same one. A NaN dense value is read as missing and contributes
// nothing, so a null feature does not poison training.
//
// # Optimizer and data parallelism
//
// Training minimizes log loss with Adagrad: per-coordinate step sizes suit
// hashed embeddings, where a rare id's row sees a few gradients and a popular
// one's thousands, and its only state is one accumulator per weight. The
// gradient is that of the batch's summed loss, not its mean, so a row that
// one example touches gets a gradient of order one whatever the batch size
// and InitialAccumulator keeps one meaning. L2 is applied lazily: a row is
// decayed only in the steps that touch it.
//
// Training is synchronous data-parallel SGD across Workers goroutines.
// Each step takes a global batch of BatchSize examples from the Source and
// cuts it into Shards fixed chunks. Workers take chunks and compute each
// chunk's gradient into its own sparse accumulator that holds only the rows
// the chunk touched, pre-split into Shards partitions by row. After a
// barrier, workers take partitions: a partition's gradients are summed over
// the chunks in chunk order and Adagrad updates exactly those rows. A second
// barrier ends the step. No gradient is ever applied to weights other than
// those it was computed from, and no two goroutines update the same weight or
// accumulator, so there is none of the staleness or racing optimizer state of
// asynchronous (Hogwild) training.
//
// Determinism: the decomposition into chunks and partitions depends on
// BatchSize and Shards only, never on Workers, and every sum runs in a fixed
// order, so the same Config (Workers aside) and the same data give
// bit-identical weights for any number of workers, 1 included. Weights are
// initialized from a hash of the seed and the weight's index. Workers beyond
// Shards would have nothing to do and are capped.
//
// # Checkpoints
//
// Every CheckpointEvery steps, and after the last step, [Trainer.Run] streams
// the full training state (configuration fingerprint, weights, Adagrad
// accumulators, step and the [Source]'s [Position]) to the [Checkpointer].
// There is no other random state: shuffling is a function of the source's
// seed and epoch, and training draws no random numbers. Run starts by
// restoring the checkpointer's latest checkpoint when there is one, so a run
// that crashed and is started again continues at that step and ends with the
// same weights as an uninterrupted run. To start from scratch, use a fresh
// checkpoint location.
//
// # Divergence
//
// [Guard] stops training with a [*DivergenceError] when a step's loss is NaN
// or infinite or the largest L2 norm of the embedding rows that step updated
// (a row being [w, v...]) exceeds MaxEmbNorm. Only updated rows can change, so
// checking them catches the first step any row crosses the limit. The same
// guard applies to the progress lines of a command trainer ([Guard.CheckEvent]).
//
// # Command trainers
//
// A user's own trainer program (see examples/torch) receives its inputs in
// the environment variables [EnvTrainData], [EnvEvalData],
// [EnvCheckpointURI], [EnvResumeFrom] and [EnvModelOut] and prints progress
// as JSON lines, {"step":…, "loss":…, "emb_max_norm":…, "checkpoint":…};
// [ReadEvents] turns its output into [Event]s, every other line being an
// ordinary log line. [Progress] has the same fields, so the node reports both
// kinds of trainer alike.
package trainer
