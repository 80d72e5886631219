package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/retrain-ml/retrain/internal/devkit/torchtest"

	"github.com/retrain-ml/retrain/activities/internal/nodetest"
	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/internal/backfill"
	"github.com/retrain-ml/retrain/internal/devkit/demodata"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/features"
	"github.com/retrain-ml/retrain/internal/lake"
	"github.com/retrain-ml/retrain/internal/npy"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// BenchmarkPeer trains the demo model twice on one demo-data split, in
// one run: with the builtin trainer (workers: 2) and with
// examples/torch/train.py (processes: 2, gloo on the CPU), both
// through this node, with the same model (hashed FM, dim 8, 2^18
// buckets, ctr-retrain's transforms), epochs, batch size, Adagrad
// settings and seed; checkpoints only after the last step. It prints both
// trainers' throughput and their models' AUC on the held-out day, each
// computed by trainer.Evaluate (the builtin model scored by the builtin
// scorer, the torch one's predictions.npy written by evaluate.py):
//
//	go test ./activities/train/ -run '^$' -bench Peer -benchtime 1x -timeout 20m
//
// RETRAIN_PEER_ROWS sets the demo rows (default 500,000 over 5 days, the
// last day held out); RETRAIN_PYTHON the Python that has torch.
func BenchmarkPeer(b *testing.B) {
	py := torchtest.Python(b)
	ctx := context.Background()
	rows := int64(500_000)
	if v, err := strconv.ParseInt(os.Getenv("RETRAIN_PEER_ROWS"), 10, 64); err == nil && v > 0 {
		rows = v
	}
	start := time.Now()
	st, data, sd, ev := benchSplit(b, ctx, rows, py)
	b.Logf("demo split: %d training and %d held-out rows, made in %.1fs", sd.Record.TrainRows, sd.Record.EvalRows, time.Since(start).Seconds())

	b.ResetTimer()
	for i := range b.N {
		runs := []peerResult{
			peerRun(b, "builtin", 2, sd, peerNode(data, fmt.Sprintf("b%d", i), map[string]any{"workers": 2}), st),
			peerRun(b, "torch", 2, sd, peerNode(data, fmt.Sprintf("t%d", i), map[string]any{
				"trainer": CommandTrainer, "data_format": split.FormatNPY, "processes": 2, "argv": torchArgv(b, py),
			}), st),
		}
		runs[0].auc = builtinAUC(b, ctx, st, runs[0].model, ev)
		runs[1].auc = ev.torchAUC(b, st, runs[1].model)
		printPeers(b, runs)
		b.ReportMetric(runs[0].rate(), "builtin_ex/s")
		b.ReportMetric(runs[1].rate(), "torch_ex/s")
		b.ReportMetric(runs[0].rate()/runs[1].rate(), "builtin/torch")
		b.ReportMetric(runs[0].auc-runs[1].auc, "auc_diff")
	}
}

// The demo model, as ctr-retrain trains it and torch-retrain mirrors it.
var (
	peerDense      = []string{"u_activity", "u_ctr_7d", "u_sessions", "u_recency_days", "ad_quality", "ad_ctr_7d", "ad_age_days"}
	peerSparse     = []string{"user_id", "ad_id", "u_recent_ads"}
	peerTransforms = map[string]string{"u_activity": "log", "u_ctr_7d": "logit", "u_sessions": "log1p", "ad_ctr_7d": "logit", "ad_age_days": "log1p"}
)

const (
	peerDays    = 5
	peerEpochs  = 2
	peerBatch   = 1024
	peerBuckets = 1 << 18
	// peerNoCheckpoints is a checkpoint interval past the last step: both
	// trainers checkpoint once, after it, so no mid-run upload is timed.
	peerNoCheckpoints = 1_000_000
)

// peerNode is a train node's input with the builtin's settings, with
// extra's keys added (a command takes its settings in argv instead).
func peerNode(data, run string, extra map[string]any) nodetype.Input {
	with := map[string]any{"data": data}
	if extra["trainer"] != CommandTrainer {
		transforms := map[string]any{}
		for k, v := range peerTransforms {
			transforms[k] = v
		}
		with = map[string]any{
			"data": data, "transforms": transforms, "dim": 8, "buckets": peerBuckets, "epochs": peerEpochs,
			"batch_size": peerBatch, "learning_rate": 0.05, "l2": 0.001, "seed": 1, "checkpoint_every": peerNoCheckpoints,
		}
	}
	for k, v := range extra {
		with[k] = v
	}
	return nodetype.Input{Pipeline: "bench", RunID: run, Node: "train", Type: "train", With: with}
}

func torchArgv(b *testing.B, py string) []any {
	var tr []string
	for _, k := range slices.Sorted(maps.Keys(peerTransforms)) {
		tr = append(tr, k+"="+peerTransforms[k])
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "torch", "train.py"))
	if err != nil {
		b.Fatal(err)
	}
	return []any{py, script, "--epochs", fmt.Sprint(peerEpochs), "--batch-size", fmt.Sprint(peerBatch), "--lr", "0.05", "--l2", "0.001",
		"--dim", "8", "--buckets", fmt.Sprint(peerBuckets), "--seed", "1", "--checkpoint-every", fmt.Sprint(peerNoCheckpoints),
		"--transforms", strings.Join(tr, ",")}
}

// demoSplit writes the demo data set into a local lake, stages and
// promotes ctr-retrain's user and ad features, and splits it as
// ctr-retrain does (the last day held out); it returns the split's URI.
// benchSplit starts a store, writes a demo split of rows rows into it and
// loads its held-out rows for scoring: what the trainer benchmarks share.
// The store logs nothing: its lines would bury their tables.
func benchSplit(b *testing.B, ctx context.Context, rows int64, py string) (*s3store.Store, string, *split.Data, *peerEval) {
	b.Helper()
	cfg := s3test.Start(b).Config("")
	cfg.Logger = quiet
	st, err := s3store.Open(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	data := demoSplit(b, ctx, st, rows)
	sd, err := split.Open(ctx, st, data)
	if err != nil {
		b.Fatal(err)
	}
	return st, data, sd, loadEval(b, ctx, st, sd, py)
}

func demoSplit(b *testing.B, ctx context.Context, st *s3store.Store, rows int64) string {
	lz := lake.NewLazy(lake.Config{DataDir: b.TempDir()}, quiet)
	b.Cleanup(func() { lz.Close() })
	cat, err := lz.Catalog(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := demodata.Write(ctx, cat, demodata.Config{Rows: rows, Days: peerDays, Seed: 1}, demodata.DefaultTables, false, nil); err != nil {
		b.Fatal(err)
	}
	first, last := demodata.DefaultStart.String(), (demodata.DefaultStart + backfill.Day(peerDays-1)).String()
	user, err := features.Stage(ctx, cat, features.StageSpec{
		Training: "ml.training", Feature: "features.user_daily", Keys: []string{"user_id"}, StartDate: first, EndDate: last,
		Alignment: "previous_day", Features: []string{"activity", "ctr_7d", "sessions", "recency_days", "recent_ads"}, Prefix: "u_",
	}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	ad, err := features.Stage(ctx, cat, features.StageSpec{
		Training: "ml.training", Feature: "features.ad_daily", Keys: []string{"ad_id"}, StartDate: first, EndDate: last, Alignment: "as_of",
	}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	pr, err := features.Promote(ctx, cat, features.PromoteSpec{
		Training: "ml.training", Staging: []string{user.Staging, ad.Staging}, StartDate: first, EndDate: last,
	}, "peer", 2, quiet)
	if err != nil {
		b.Fatal(err)
	}
	splits := &split.Splits{Catalog: lz, Store: st, Logger: quiet}
	out := runNode(b, splits.Run, nodetype.Input{Pipeline: "bench", RunID: "peer", Node: "split", Type: "split", With: map[string]any{
		"table": "ml.training", "snapshot_id": strconv.FormatInt(pr.Snapshot, 10), "start_date": first, "end_date": last,
		"dense": toAny(peerDense), "sparse": toAny(peerSparse), "slice": "date", "eval_days": 1,
	}})
	return out["uri"].(string)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// runNode runs a node function in the activity wrapper (nodetest.Run) and
// stops the benchmark if it fails.
func runNode(b *testing.B, fn nodetype.Func, in nodetype.Input) map[string]any {
	b.Helper()
	out, err := nodetest.Run(b, fn, in, nil)
	if err != nil {
		b.Fatalf("node %s: %v", in.Node, err)
	}
	return out
}

// peerResult is one trainer's figures.
type peerResult struct {
	trainer   string
	processes int
	examples  int64
	loop      time.Duration // the training loop: the sum of its progress records' intervals
	node      time.Duration // the whole node: data, start, loop, model upload
	prep      time.Duration // node start to the program's start (command only)
	startup   time.Duration // program start to its first log line after loading the data (command only)
	model     string        // the model folder's URI
	auc       float64
}

func (r peerResult) rate() float64 { return float64(r.examples) / r.loop.Seconds() }

// peerRun runs one train node and measures it.
func peerRun(b *testing.B, name string, processes int, sd *split.Data, in nodetype.Input, st *s3store.Store) peerResult {
	stamps := &stampHandler{}
	tr := &Trainers{Store: st, Logger: slog.New(stamps)}
	start := time.Now()
	out := runNode(b, tr.Run, in)
	res := peerResult{trainer: name, processes: processes, node: time.Since(start), model: out["model_uri"].(string)}
	res.examples = sd.Record.TrainRows * peerEpochs
	if ex, ok := out["examples"].(float64); ok && int64(ex) != res.examples {
		b.Fatalf("%s trained %v examples, want %d", name, ex, res.examples)
	}
	if begun, loaded := stamps.times(); !begun.IsZero() && !loaded.IsZero() {
		res.prep, res.startup = begun.Sub(start), loaded.Sub(begun)
	}

	// Each progress record holds the examples per second since the one
	// before; every step is recorded, all of batch size but the last. The
	// last step's interval holds the one checkpoint: the builtin's upload
	// to the store, train.py's local torch.save (the node uploads it
	// after, outside the loop's time).
	var curve []CurvePoint
	key, err := objects.StoreKey(st, out["loss_curve_uri"].(string))
	if err != nil {
		b.Fatal(err)
	}
	if err := objects.GetJSON(context.Background(), st, key, &curve); err != nil {
		b.Fatal(err)
	}
	steps := int64(out["steps"].(float64))
	if int64(len(curve)) != steps || steps != (res.examples+peerBatch-1)/peerBatch {
		b.Fatalf("%s: %d progress records for %d steps, want one per step of %d examples", name, len(curve), steps, peerBatch)
	}
	var secs float64
	for i, p := range curve {
		n := int64(peerBatch)
		if i == len(curve)-1 {
			n = res.examples - peerBatch*(steps-1)
		}
		secs += float64(n) / p.ExamplesPerSec
	}
	res.loop = time.Duration(secs * float64(time.Second))
	b.Logf("%s: %d steps, last loss %v", name, steps, out["loss"])
	return res
}

// stampHandler notes when the node starts a command trainer and when the
// program logs that it has loaded its data (train.py's "N examples, ..."
// line); it logs nothing.
type stampHandler struct {
	mu            sync.Mutex
	begun, loaded time.Time
}

func (h *stampHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *stampHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *stampHandler) WithGroup(string) slog.Handler            { return h }

func (h *stampHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Message == "trainer starting" && h.begun.IsZero() {
		h.begun = r.Time
	}
	if r.Message == "output" && h.loaded.IsZero() {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "line" && strings.Contains(a.Value.String(), " examples, dense ") {
				h.loaded = r.Time
			}
			return true
		})
	}
	return nil
}

func (h *stampHandler) times() (begun, loaded time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.begun, h.loaded
}

// peerEval is the held-out data both models are scored on: as the
// builtin's examples, and as npy for evaluate.py, in the same row order.
type peerEval struct {
	py       string
	dir      string
	examples []trainer.Example
	labels   []float32
}

func loadEval(b *testing.B, ctx context.Context, st *s3store.Store, sd *split.Data, py string) *peerEval {
	d, err := sd.Load(ctx, st, split.EvalDataset)
	if err != nil {
		b.Fatal(err)
	}
	ev := &peerEval{py: py, dir: b.TempDir()}
	if ev.examples, err = d.Examples(peerDense, peerSparse); err != nil {
		b.Fatal(err)
	}
	if err := sd.Localize(ctx, st, split.EvalDataset, filepath.Join(ev.dir, "eval"), split.FormatNPY); err != nil {
		b.Fatal(err)
	}
	labels := readNPY[float32](b, filepath.Join(ev.dir, "eval", "label.npy"))
	if len(labels) != len(ev.examples) {
		b.Fatalf("npy eval data: %d labels for %d examples", len(labels), len(ev.examples))
	}
	for i, ex := range ev.examples {
		if ex.Label != labels[i] {
			b.Fatalf("npy eval row %d has label %v, the builtin's example %v: not the same row order", i, labels[i], ex.Label)
		}
	}
	ev.labels = labels
	return ev
}

func readNPY[T float32 | float64](b *testing.B, path string) []T {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	v, _, err := npy.Read[T](f)
	if err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	return v
}

// builtinAUC scores the builtin's model.bin with the builtin scorer.
func builtinAUC(b *testing.B, ctx context.Context, st *s3store.Store, modelURI string, ev *peerEval) float64 {
	key, err := objects.StoreKey(st, modelURI)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), ModelFile)
	if err := objects.DownloadFile(ctx, st, key+ModelFile, path); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := trainer.ReadModel(f)
	if err != nil {
		b.Fatal(err)
	}
	got, err := trainer.Evaluate(m.PredictBatch(ev.examples, nil), ev.labels)
	if err != nil {
		b.Fatal(err)
	}
	return got.AUC
}

// torchAUC runs evaluate.py on the torch model and scores the
// predictions it writes with the builtin's metric code.
func (ev *peerEval) torchAUC(b *testing.B, st *s3store.Store, modelURI string) float64 {
	ctx := context.Background()
	dir := b.TempDir()
	key, err := objects.StoreKey(st, modelURI)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := objects.DownloadPrefix(ctx, st, key, filepath.Join(dir, "model")); err != nil {
		b.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "torch", "evaluate.py"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(ev.py, script)
	cmd.Env = append(os.Environ(), "RETRAIN_MODEL_DIR="+filepath.Join(dir, "model"), "RETRAIN_EVAL_DATA="+filepath.Join(ev.dir, "eval"),
		"RETRAIN_METRICS_OUT="+filepath.Join(dir, "metrics.json"), "RETRAIN_PREDICTIONS_OUT="+filepath.Join(dir, "predictions.npy"),
		"RETRAIN_MODEL_ROLE=candidate")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("evaluate.py: %v\n%s", err, out)
	}
	preds32 := readNPY[float32](b, filepath.Join(dir, "predictions.npy"))
	preds := make([]float64, len(preds32))
	for i, p := range preds32 {
		preds[i] = float64(p)
	}
	got, err := trainer.Evaluate(preds, ev.labels)
	if err != nil {
		b.Fatal(err)
	}
	var own struct {
		Overall struct {
			AUC float64 `json:"auc"`
		} `json:"overall"`
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "metrics.json")); err == nil && json.Unmarshal(raw, &own) == nil {
		b.Logf("torch: evaluate.py's own AUC %.4f", own.Overall.AUC)
	}
	return got.AUC
}

func printPeers(b *testing.B, runs []peerResult) {
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "trainer\tprocesses\tepochs\tbatch\texamples\ttrain s\texamples/s\tnode s\tprep s\tstartup s\tAUC\t")
	for _, r := range runs {
		prep, startup := "-", "-"
		if r.startup > 0 {
			prep, startup = fmt.Sprintf("%.1f", r.prep.Seconds()), fmt.Sprintf("%.1f", r.startup.Seconds())
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%.1f\t%.0f\t%.1f\t%s\t%s\t%.4f\t\n", r.trainer, r.processes, peerEpochs, peerBatch,
			r.examples, r.loop.Seconds(), r.rate(), r.node.Seconds(), prep, startup, r.auc)
	}
	w.Flush()
	fmt.Fprintf(&buf, "builtin/torch examples/s: %.2fx; AUC builtin - torch: %+.4f\n", runs[0].rate()/runs[1].rate(), runs[0].auc-runs[1].auc)
	b.Logf("\n%s", buf.String())
}
