package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/activities/split"
	"github.com/retrain-ml/retrain/internal/devkit/torchtest"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/nodetype"
)

// BenchmarkTorchRanks trains the demo model with examples/torch/train.py
// as processes: 1 and processes: 2 (gloo on the CPU) on one demo-data
// split, alternating the two for several rounds (the machine's load
// varies; a ratio is taken within a round), one epoch, and prints per
// configuration the training loop's time (the sum of its progress records'
// intervals), the node's, the final loss, the AUC on the held-out day
// (first round), and what train.py's "communication:" line reports: the
// bytes all-reduced per step and the share of the loop spent waiting on
// the all-reduce.
//
//	go test ./activities/train/ -run '^$' -bench TorchRanks -benchtime 1x -timeout 30m
//
// RETRAIN_TORCH_ROWS sets the demo rows (default 200,000 over 5 days, the
// last held out), RETRAIN_TORCH_ROUNDS the rounds (3), RETRAIN_TORCH_BATCH
// the global batch (1024), RETRAIN_TORCH_COMPARE other train.py files to
// run in the same rounds, as NAME=PATH[,NAME=PATH] (for instance an earlier
// version: git show REV:examples/torch/train.py > /tmp/old/train.py, with
// its fm.py beside it), RETRAIN_PYTHON the Python that has torch.
func BenchmarkTorchRanks(b *testing.B) {
	py := torchtest.Python(b)
	ctx := context.Background()
	rows, rounds, batch := envInt(b, "RETRAIN_TORCH_ROWS", 200_000), envInt(b, "RETRAIN_TORCH_ROUNDS", 3), envInt(b, "RETRAIN_TORCH_BATCH", 1024)
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "torch", "train.py"))
	if err != nil {
		b.Fatal(err)
	}
	scripts := [][2]string{{"current", script}}
	if v := os.Getenv("RETRAIN_TORCH_COMPARE"); v != "" {
		for _, kv := range strings.Split(v, ",") {
			name, path, ok := strings.Cut(kv, "=")
			if !ok {
				b.Fatalf("RETRAIN_TORCH_COMPARE=%q: want NAME=PATH[,NAME=PATH]", v)
			}
			scripts = append(scripts, [2]string{name, path})
		}
	}

	st, data, sd, ev := benchSplit(b, ctx, int64(rows), py)
	b.Logf("demo split: %d training and %d held-out rows; %d rounds, batch %d, 1 epoch; load average %s",
		sd.Record.TrainRows, sd.Record.EvalRows, rounds, batch, loadAvg())

	type key struct {
		script    string
		processes int
	}
	results := map[key][]ranksResult{}
	b.ResetTimer()
	for i := range b.N {
		for round := range rounds {
			for _, s := range scripts {
				for _, n := range []int{1, 2} {
					r := ranksRun(b, st, sd, data, fmt.Sprintf("%s-%d-%d-%d", s[0], n, i, round), py, s[1], n, batch)
					if round == 0 {
						r.auc = ev.torchAUC(b, st, r.model)
					}
					k := key{s[0], n}
					results[k] = append(results[k], r)
				}
			}
		}
	}
	b.StopTimer()

	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "train.py\tprocesses\tsteps\tloop s (median)\tmin\tmax\tnode s\tloss\tAUC\tbytes/step\tcomm share\tper rank\tCPU per rank\t")
	for _, s := range scripts {
		for _, n := range []int{1, 2} {
			rs := results[key{s[0], n}]
			loops := sortedOf(rs, func(r ranksResult) float64 { return r.loop.Seconds() })
			nodes := sortedOf(rs, func(r ranksResult) float64 { return r.node.Seconds() })
			bytesStep, share, perRank, cpu := "-", "-", "-", "-"
			if c := rs[0].comm; c != nil {
				shares := sortedOf(rs, func(r ranksResult) float64 { return r.comm.CommShare })
				bytesStep, share = strconv.FormatInt(c.BytesPerStep, 10), fmt.Sprintf("%.3f", median(shares))
				// The round whose loop time is the median's.
				mid := rs[0]
				for _, r := range rs {
					if r.loop.Seconds() == median(loops) || len(rs)%2 == 0 {
						mid = r
						break
					}
				}
				perRank = fmt.Sprint(mid.comm.PerRank)
				if mid.comm.CPUPerRank != nil {
					cpu = fmt.Sprint(mid.comm.CPUPerRank)
				}
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.6f\t%.5f\t%s\t%s\t%s\t%s\t\n", s[0], n, rs[0].steps,
				median(loops), loops[0], loops[len(loops)-1], median(nodes), rs[0].loss, rs[0].auc, bytesStep, share, perRank, cpu)
			for _, r := range rs[1:] {
				if r.loss != rs[0].loss {
					b.Errorf("%s, %d processes: final loss %v in one round, %v in another", s[0], n, r.loss, rs[0].loss)
				}
			}
		}
	}
	w.Flush()
	for _, s := range scripts {
		one, two := results[key{s[0], 1}], results[key{s[0], 2}]
		var ratios, nodeRatios []float64
		for i := range one {
			ratios = append(ratios, two[i].loop.Seconds()/one[i].loop.Seconds())
			nodeRatios = append(nodeRatios, two[i].node.Seconds()/one[i].node.Seconds())
		}
		sort.Float64s(ratios)
		sort.Float64s(nodeRatios)
		fmt.Fprintf(&buf, "%s: 2 processes / 1, loop time: median %.2fx (rounds %.2f-%.2f); node time: median %.2fx; AUC 2 - 1: %+.5f\n",
			s[0], median(ratios), ratios[0], ratios[len(ratios)-1], median(nodeRatios), two[0].auc-one[0].auc)
		if s[0] == "current" {
			b.ReportMetric(median(ratios), "loop_2/1")
			if c := two[0].comm; c != nil {
				b.ReportMetric(float64(c.BytesPerStep), "bytes/step")
			}
		}
	}
	fmt.Fprintf(&buf, "load average at the end: %s\n", loadAvg())
	fmt.Print(buf.String()) // b.Logf would cut a benchmark's log at 10 lines
}

// ranksResult is one run's figures.
type ranksResult struct {
	steps      int64
	loop, node time.Duration
	loss, auc  float64
	model      string
	comm       *commReport // nil where the script prints none
}

// commReport is train.py's "communication:" log line.
type commReport struct {
	Ranks        int       `json:"ranks"`
	BytesPerStep int64     `json:"allreduce_bytes_per_step"`
	CommS        float64   `json:"comm_s"`
	LoopS        float64   `json:"loop_s"`
	CommShare    float64   `json:"comm_share"`
	PerRank      []float64 `json:"comm_share_per_rank"`
	CPUPerRank   []float64 `json:"cpu_per_rank"`
}

func ranksRun(b *testing.B, st *s3store.Store, sd *split.Data, data, run, py, script string, processes, batch int) ranksResult {
	var tr []string
	for _, k := range slices.Sorted(maps.Keys(peerTransforms)) {
		tr = append(tr, k+"="+peerTransforms[k])
	}
	argv := []any{py, script, "--epochs", "1", "--batch-size", strconv.Itoa(batch), "--lr", "0.05", "--l2", "0.001",
		"--dim", "8", "--buckets", strconv.Itoa(peerBuckets), "--seed", "1", "--checkpoint-every", strconv.Itoa(peerNoCheckpoints),
		"--transforms", strings.Join(tr, ",")}
	in := nodetype.Input{Pipeline: "bench", RunID: run, Node: "train", Type: "train", With: map[string]any{
		"data": data, "trainer": CommandTrainer, "data_format": split.FormatNPY, "processes": processes, "argv": argv,
	}}
	lines := &lineCatcher{prefix: "communication: "}
	tr2 := &Trainers{Store: st, Logger: slog.New(lines)}
	start := time.Now()
	out := runNode(b, tr2.Run, in)
	res := ranksResult{node: time.Since(start), model: out["model_uri"].(string), loss: out["loss"].(float64)}
	res.steps = int64(out["steps"].(float64))

	var curve []CurvePoint
	key, err := objects.StoreKey(st, out["loss_curve_uri"].(string))
	if err != nil {
		b.Fatal(err)
	}
	if err := objects.GetJSON(context.Background(), st, key, &curve); err != nil {
		b.Fatal(err)
	}
	examples := sd.Record.TrainRows
	if want := (examples + int64(batch) - 1) / int64(batch); int64(len(curve)) != res.steps || res.steps != want {
		b.Fatalf("%s: %d progress records for %d steps, want %d", run, len(curve), res.steps, want)
	}
	var secs float64
	for i, p := range curve {
		n := int64(batch)
		if i == len(curve)-1 {
			n = examples - int64(batch)*(res.steps-1)
		}
		secs += float64(n) / p.ExamplesPerSec
	}
	res.loop = time.Duration(secs * float64(time.Second))
	if l := lines.get(); l != "" {
		res.comm = &commReport{}
		if err := json.Unmarshal([]byte(l), res.comm); err != nil {
			b.Fatalf("%s: communication line %q: %v", run, l, err)
		}
	}
	return res
}

// lineCatcher keeps the last output line the node logs that starts with
// prefix, without it; it logs nothing.
type lineCatcher struct {
	prefix string
	mu     sync.Mutex
	line   string
}

func (h *lineCatcher) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineCatcher) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lineCatcher) WithGroup(string) slog.Handler            { return h }

func (h *lineCatcher) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "output" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "line" {
			if rest, ok := strings.CutPrefix(a.Value.String(), h.prefix); ok {
				h.mu.Lock()
				h.line = rest
				h.mu.Unlock()
			}
		}
		return true
	})
	return nil
}

func (h *lineCatcher) get() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.line
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func sortedOf(rs []ranksResult, f func(ranksResult) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	sort.Float64s(out)
	return out
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
