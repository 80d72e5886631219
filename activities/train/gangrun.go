package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/retrain-ml/retrain/activities/internal/objects"
	"github.com/retrain-ml/retrain/dags"
	"github.com/retrain-ml/retrain/errtype"
	"github.com/retrain-ml/retrain/gpu"
	"github.com/retrain-ml/retrain/internal/checkpoint"
	"github.com/retrain-ml/retrain/internal/gang"
	"github.com/retrain-ml/retrain/internal/s3store"
	"github.com/retrain-ml/retrain/internal/trainer"
	"github.com/retrain-ml/retrain/nodetype"
)

// Host is a worker as a host of gangs.
type Host struct {
	ID        string `json:"id"`
	Address   string `json:"address"`
	Interface string `json:"interface,omitempty"`
}

// HostDirectory lists the live hosts that poll queue, by host id.
type HostDirectory func(ctx context.Context, queue string) ([]string, error)

// gangHost is this worker's part of a gang attempt: its place in the
// layout and the GPUs it leased when it joined (nil: it asked for none).
type gangHost struct {
	layout gang.Layout
	host   int
	lease  *gpu.Lease
}

// primary reports whether this worker runs rank 0: alone, or as a gang's
// first host.
func (g *gangHost) primary() bool { return g == nil || g.host == 0 }

// LeaseInput asks a host to join a gang: lease its GPUs and hold them
// for the gang's ranks until Hold has passed.
type LeaseInput struct {
	Key  string        `json:"key"` // the gang attempt
	GPUs int           `json:"gpus"`
	Hold time.Duration `json:"hold"`
	// Processes and Hosts are the ranks per host and the hosts of the
	// gang, which the host refuses past its limits before it leases
	// (0: sent by a workflow from before the limits, not checked here;
	// the run checks them).
	Processes int `json:"processes,omitempty"`
	Hosts     int `json:"hosts,omitempty"`
}

// RunInput runs one host's ranks of a gang attempt.
type RunInput struct {
	Node      nodetype.Input `json:"node"`
	Key       string         `json:"key"`
	Host      int            `json:"host"` // this host's place in Members
	Members   []gang.Member  `json:"members"`
	Processes int            `json:"processes"`
}

// HostResult is what one host of a gang reports: host 0 the node's
// outputs, every host its ranks' pace.
type HostResult struct {
	Outputs *Outputs            `json:"outputs,omitempty"`
	Ranks   []gang.RankProgress `json:"ranks"`
	// Data is what the host read of the training data for its ranks.
	Data *DataRead `json:"data,omitempty"`
}

// HostOutput is one host of a gang in the node's outputs.
type HostOutput struct {
	Host        string   `json:"host"`
	Address     string   `json:"address"`
	Ranks       []int    `json:"ranks"`
	GPUs        []string `json:"gpus,omitempty"`
	Steps       int64    `json:"steps"`
	StepsPerSec float64  `json:"steps_per_sec"`
	// Data is what the host read of the training data for its ranks.
	Data *DataRead `json:"data,omitempty"`
}

// GangAttempt is one gang the node formed (or tried to), and how it ended.
type GangAttempt struct {
	Attempt int      `json:"attempt"`
	Hosts   []string `json:"hosts"`
	Error   string   `json:"error,omitempty"`
	// When the attempt began looking for hosts, when every host held its
	// GPUs (absent if the gang never formed), and when it ended.
	StartedAt time.Time  `json:"started_at"`
	FormedAt  *time.Time `json:"formed_at,omitempty"`
	EndedAt   time.Time  `json:"ended_at"`
}

// heldLeases are the GPUs a worker holds for the gangs it joined, by gang
// attempt, until that attempt's run takes them or the hold expires (the
// workflow gave up on the gang, or died): a gang never keeps GPUs on one
// host while it waits forever for another.
type heldLeases struct {
	mu sync.Mutex
	m  map[string]*heldLease
}

type heldLease struct {
	lease *gpu.Lease // nil: the gang asked for no GPU
	timer *time.Timer
}

func (h *heldLeases) put(key string, lease *gpu.Lease, hold time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]*heldLease{}
	}
	if old, ok := h.m[key]; ok {
		old.timer.Stop()
		old.lease.Release()
	}
	hl := &heldLease{lease: lease}
	hl.timer = time.AfterFunc(hold, func() { h.release(key) })
	h.m[key] = hl
}

// take hands the lease held for key to its run; false when none is held.
func (h *heldLeases) take(key string) (*gpu.Lease, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hl, ok := h.m[key]
	if !ok {
		return nil, false
	}
	hl.timer.Stop()
	delete(h.m, key)
	return hl.lease, true
}

func (h *heldLeases) release(key string) bool {
	lease, ok := h.take(key)
	lease.Release() // a nil lease's Release does nothing
	return ok
}

// GangHosts lists the live hosts polling queue.
func (t *Trainers) GangHosts(ctx context.Context, queue string) ([]string, error) {
	if t.Hosts == nil {
		return nil, temporal.NewNonRetryableApplicationError("this worker cannot list the hosts of a queue", errtype.BadInput, nil)
	}
	return t.Hosts(ctx, queue)
}

// GangLease joins this host to a gang: it leases the GPUs the gang asks
// of each host (waiting while other jobs hold them) and holds them until
// the gang's run on this host takes them, or in.Hold passes. It returns
// the member this host is: its id, address and a free port.
func (t *Trainers) GangLease(ctx context.Context, in LeaseInput) (gang.Member, error) {
	if t.Host.ID == "" || t.Host.Address == "" {
		return gang.Member{}, temporal.NewNonRetryableApplicationError("this worker has no host id or address", errtype.BadInput, nil)
	}
	// Before any GPU is leased: a gang past this host's limits never
	// holds anything here.
	if err := t.checkLimits(in.Processes, "", in.Hosts); err != nil {
		return gang.Member{}, err
	}
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	var lease *gpu.Lease
	if in.GPUs > 0 {
		if t.GPUs == nil {
			return gang.Member{}, nodetype.Permanent(errtype.NoGPUs, "the gang asks each host for %d GPUs, but host %s has none: run it on the GPU queue", in.GPUs, t.Host.ID)
		}
		var err error
		if lease, err = t.GPUs.Acquire(ctx, in.GPUs); err != nil {
			return gang.Member{}, fmt.Errorf("host %s: lease %d GPUs: %w", t.Host.ID, in.GPUs, err)
		}
	}
	port, err := freePort(t.Host.Address)
	if err != nil {
		lease.Release()
		return gang.Member{}, err
	}
	t.held.put(in.Key, lease, in.Hold)
	m := gang.Member{Host: t.Host.ID, Address: t.Host.Address, Interface: t.Host.Interface, Port: port}
	if lease != nil {
		m.GPUs = lease.UUIDs()
	}
	t.Logger.Info("joined a training gang", "gang", in.Key, "host", m.Host, "address", m.Address, "gpus", m.GPUs)
	return m, nil
}

// GangRelease releases what this host holds for a gang that did not form.
func (t *Trainers) GangRelease(_ context.Context, key string) error {
	if t.held.release(key) {
		t.Logger.Info("released a training gang's lease", "gang", key)
	}
	return nil
}

// GangRun runs this host's ranks of a gang with the GPUs it leased when
// it joined. Its error names the host; a rank's failure, a hang, the
// context's end (the gang was cancelled because another host failed) all
// end every rank here.
func (t *Trainers) GangRun(ctx context.Context, in RunInput) (HostResult, error) {
	lease, ok := t.held.take(in.Key)
	if !ok {
		return HostResult{}, temporal.NewApplicationError(fmt.Sprintf(
			"host %s no longer holds the gang's GPUs (its worker restarted, or the hold expired): the gang is formed again", t.Host.ID), errtype.GangLost)
	}
	defer lease.Release()
	ctx, stop := nodetype.StartKeepAlive(ctx)
	defer stop()
	// The node's secrets resolve here as they do for a node's own
	// activity (nodetype.Activity): the spec's ${secret.NAME} references
	// in env get their values, and whatever this host hands Temporal (its
	// error, its outputs, its progress heartbeats) has them masked.
	ctx = nodetype.WithSecretRefs(ctx, in.Node.Secrets)
	ctx = nodetype.WithSecretRegistry(ctx)
	res, err := t.gangRun(ctx, in, lease)
	mask := nodetype.SecretMasker(ctx)
	if err != nil {
		return maskResult(mask, res), mask.Error(err)
	}
	return maskResult(mask, res), nil
}

// maskResult is res with the secrets mask knows masked wherever they
// appear (a summary, a checkpoint URI the program wrote).
func maskResult(mask *nodetype.Masker, res HostResult) HostResult {
	if mask.Empty() {
		return res
	}
	b, err := json.Marshal(res)
	if err != nil || !mask.Contains(string(b)) {
		return res
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // steps stay exact
	var v any
	if d.Decode(&v) != nil {
		return HostResult{}
	}
	var out HostResult
	b, err = json.Marshal(mask.Value(v))
	if err != nil || json.Unmarshal(b, &out) != nil {
		return HostResult{} // nothing rather than a secret
	}
	return out
}

// gangRun runs this host's ranks (GangRun, with its secrets in ctx).
func (t *Trainers) gangRun(ctx context.Context, in RunInput, lease *gpu.Lease) (HostResult, error) {
	r, w, err := t.newRun(in.Node)
	if err != nil {
		return HostResult{}, err
	}
	if in.Host < 0 || in.Host >= len(in.Members) || in.Processes < 1 {
		return HostResult{}, nodetype.Permanent(errtype.BadInput, "host %d of %d, %d processes: not a gang's host", in.Host, len(in.Members), in.Processes)
	}
	if err := t.checkLimits(in.Processes, processWhy(w), len(in.Members)); err != nil {
		return HostResult{}, err
	}
	if err := gang.Check(in.Members); err != nil {
		return HostResult{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	r.log = r.log.With("host", t.Host.ID, "gang_host", in.Host)
	g := &gangHost{layout: gang.Layout{Members: in.Members, Processes: in.Processes}, host: in.Host, lease: lease}
	started := time.Now()
	out, err := r.command(ctx, g)
	res := HostResult{Ranks: r.watch.Progress()}
	if err != nil && ctx.Err() != nil {
		return res, ctx.Err() // the gang was stopped: a cancellation, not this host's failure
	}
	if err != nil {
		return res, hostError(in, err)
	}
	res.Data = out.Data
	if g.primary() {
		out.Summary = out.summary(w, time.Since(started))
		res.Outputs = &out
	}
	return res, nil
}

// newRun is an attempt of the train node in: its with block checked and
// decoded, and where its checkpoints go.
func (t *Trainers) newRun(in nodetype.Input) (*trainRun, With, error) {
	if err := checkTrain(in.With); err != nil {
		return nil, With{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	w, err := nodetype.DecodeWith[With](in.With)
	if err != nil {
		return nil, With{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	if t.Store == nil {
		return nil, With{}, objects.NoStore()
	}
	fingerprint, err := checkpoint.Fingerprint(fingerprinted(in.With, w))
	if err != nil {
		return nil, With{}, nodetype.Permanent(errtype.BadInput, "%v", err)
	}
	for _, seg := range []string{in.Pipeline, in.RunID, in.Node} {
		if err := s3store.ValidateKey(seg); err != nil || strings.Contains(seg, "/") {
			return nil, With{}, nodetype.Permanent(errtype.BadInput, "cannot train for pipeline %q, run %q, node %q: each must be a single key segment", in.Pipeline, in.RunID, in.Node)
		}
	}
	r := &trainRun{
		t: t, in: in, w: w,
		log:    t.Logger.With("pipeline", in.Pipeline, "run", in.RunID, "node", in.Node, "trainer", w.Trainer),
		prefix: fmt.Sprintf("checkpoints/%s/%s/%s/%s/", in.Pipeline, in.RunID, in.Node, fingerprint),
		guard:  trainer.Guard{MaxEmbNorm: w.MaxEmbNorm},
		watch:  gang.NewWatch(),
	}
	r.hangTimeout, _ = dags.ParseDuration(w.HangTimeout) // checked by checkTrain
	return r, w, nil
}

// layoutFields are the fields of a train node that place its ranks, not
// what they train.
var layoutFields = []string{"hosts", "processes", "gpus", "gang_timeout", "hang_timeout"}

// fingerprinted is what names a train node's checkpoint folder: its
// resolved with. With shard_data the ranks' layout is left out, so that
// the run started again under its id with another world size (hosts,
// processes, GPUs) resumes from its checkpoint, on the rest of the
// interrupted epoch; without, it is kept (folders of nodes recorded
// before stay where they are).
func fingerprinted(with map[string]any, w With) map[string]any {
	if !w.ShardData {
		return with
	}
	out := maps.Clone(with)
	for _, f := range layoutFields {
		delete(out, f)
	}
	return out
}

// hostError is a host's failure as the gang reports it: the host named,
// its type and retryability kept (a divergence or a bad input fails the
// node; a rank's crash, a hang or a lost peer form the gang again).
func hostError(in RunInput, err error) error {
	m := in.Members[in.Host]
	msg := fmt.Sprintf("host %d of %d (%s, %s): %s", in.Host, len(in.Members), m.Host, m.Address, nodetype.MessageOf(err))
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return temporal.NewApplicationErrorWithOptions(msg, appErr.Type(), temporal.ApplicationErrorOptions{NonRetryable: appErr.NonRetryable()})
	}
	return temporal.NewApplicationError(msg, errtype.NodeFailed) // retried: a download, a store that failed
}
