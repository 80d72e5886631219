#!/usr/bin/env python3
"""A retrain command trainer: a CTR model trained data parallel with torch.distributed.

It implements retrain's command-trainer contract (see README.md) and needs
only torch and numpy:

* it reads RETRAIN_TRAIN_DATA (and RETRAIN_EVAL_DATA) in the npy layout:
  give the train node `data_format: npy`;
* it prints progress as JSON lines on rank 0's stdout,
  {"step", "total", "loss", "emb_max_norm", "examples_per_sec", "checkpoint"},
  and {"step"} on every other rank's, which the node reads to tell a stuck
  rank (hang_timeout); every other line is a log line;
* it checkpoints into RETRAIN_CHECKPOINT_URI (a local folder) and resumes
  from RETRAIN_RESUME_FROM;
* it prints its threads' stacks on SIGUSR1 (faulthandler), which the node
  sends a rank that stops advancing (hang_timeout);
* it writes model.pt and meta.json into RETRAIN_MODEL_OUT.

The train node starts it as `processes: N` ranks on each of `hosts: M`
workers with torch.distributed's env:// variables (MASTER_ADDR, MASTER_PORT,
RANK, WORLD_SIZE, NODE_RANK, ...; GLOO_SOCKET_IFNAME between hosts): synchronous data parallelism over gloo on CPU, nccl when
CUDA is available (rank r uses GPU LOCAL_RANK). Without WORLD_SIZE it trains
as a single process.

The model is the builtin trainer's (see fm.py), trained the way the builtin
trains it: Adagrad (initial accumulator 0.1) on the summed log loss of a
global batch of --batch-size examples, L2 on the weights a step updates,
epochs shuffled by seed and epoch number, a batch crossing into the next
epoch where one ends. Rank r takes every WORLD_SIZE-th example of each
global batch.

With the node's shard_data (RETRAIN_SHARD_COUNT set) its RETRAIN_TRAIN_DATA
is its share alone, and it takes its part of each global batch
(batch-size / WORLD_SIZE examples) from its share in the share's order,
shuffled only within what it trains between two checkpoints (shardplan.py),
so that each checkpoint's progress line can say where every rank stands
(shard_epoch, shard_done) and a gang resumed with another world size trains
the rest of that epoch (RETRAIN_SHARD_REST_DATA) first: every row of an
epoch is trained once, however the gang is interrupted. An epoch runs as
many steps as the largest share needs; a rank past its share takes part
with a weightless row.

A step changes only the table rows its global batch touches (a few
thousand of the 2^18), so that is all the ranks exchange: every rank knows
the global batch, hence its touched rows U; it computes the gradient of its
examples' summed loss with respect to the rows U only (a |U| x (1+dim)
tensor, zero where its own examples do not reach), and one all-reduce per
step sums those, the dense weights' and bias's gradients and the loss, in
one flat float32 buffer. Every rank then applies the same Adagrad update to
the rows U (what torch.optim.Adagrad does with a sparse gradient: rows
outside U keep their weights and accumulators) and to the dense weights, so
the ranks' models stay equal and one process makes the same updates, up to
the order of float sums. rank 0 prints the bytes all-reduced per step and
the share of the loop's time spent in the all-reduce at the end.
"""

import argparse
import copy
import faulthandler
import json
import math
import os
import shutil
import signal
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import fm
import shardplan

# For tests of the node's supervision: "RANK:STEP[:CODE]" makes that rank
# exit with CODE (default 7) right after STEP, as if it had crashed.
EXIT_AT = "TRAIN_PY_EXIT_AT"
# "RANK:STEP" makes that rank stop advancing after STEP (it sleeps), as a
# rank stuck in a data loader or a dead peer's collective would.
HANG_AT = "TRAIN_PY_HANG_AT"
# For tests of sharded data: "COLUMN" makes each rank log, each step, the
# count, sum and sum of squares of the int column COLUMN.npy of the rows it
# trained ("shard-step world=... phase=... epoch=... rank=... step=...
# count=... sum=... sumsq=..."), so a test can check that an epoch's rows
# were trained once each.
LOG_IDS = "TRAIN_PY_LOG_IDS"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=2, help="passes over the training data")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: the end of the epochs)")
    p.add_argument("--batch-size", type=int, default=1024, help="global batch of one step, over all ranks")
    p.add_argument("--lr", type=float, default=0.05, help="Adagrad learning rate")
    p.add_argument("--l2", type=float, default=0.001, help="L2 on the weights a step updates (not the bias)")
    p.add_argument("--dim", type=int, default=8, help="embedding size (0: logistic regression)")
    p.add_argument("--buckets", type=int, default=1 << 18, help="rows of the hashed id table")
    p.add_argument("--seed", type=int, default=1, help="initial weights and shuffle (0 is 1)")
    p.add_argument("--transforms", default="", help="dense feature transforms as the builtin's, e.g. u_activity=log,u_ctr_7d=logit")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    p.add_argument("--keep-checkpoints", type=int, default=3, help="local checkpoints kept")
    p.add_argument("--log-every", type=int, default=1, help="steps between progress lines")
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads per rank on the CPU (0: the cores / LOCAL_WORLD_SIZE); the demo "
                        "model's ops are too small to gain from more than 1, and idle threads that spin "
                        "cost the most where the cores are shared")
    args = p.parse_args()
    args.seed = max(args.seed, 1)  # the builtin trains seed 0 as seed 1
    if args.threads < 0:
        p.error("--threads must be at least 0")
    for name in ("epochs", "batch_size", "buckets", "checkpoint_every", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def wait_all_reduce(work):
    # A function of its own, so that a stack printed while a rank waits
    # here (SIGUSR1) says it waits in a collective, not in its own code.
    work.wait()


def emit(**record):
    # json.dumps writes NaN and Infinity bare; retrain's parser reads them.
    print(json.dumps(record), flush=True)


def log(*a):
    print(*a, flush=True)


class Order:
    """The global batches: each epoch a permutation drawn from the seed and
    the epoch number only, so a resumed run reads what the first would
    have; batches run on across epoch ends, like the builtin's."""

    def __init__(self, n, epochs, batch, seed):
        self.n, self.epochs, self.batch, self.seed = n, epochs, batch, seed
        self.total = math.ceil(n * epochs / batch)
        self._perms = {}

    def perm(self, epoch):
        if epoch not in self._perms:
            self._perms = {epoch: np.random.default_rng([self.seed, epoch]).permutation(self.n)}
        return self._perms[epoch]

    def batch_of(self, step):
        """The example indexes of global batch number step (0-based)."""
        pos, end = step * self.batch, min((step + 1) * self.batch, self.n * self.epochs)
        parts = []
        while pos < end:
            epoch, off = divmod(pos, self.n)
            take = min(end - pos, self.n - off)
            parts.append(self.perm(epoch)[off:off + take])
            pos += take
        return np.concatenate(parts)


def all_touched(local, world, device):
    """The union over ranks of the table rows their parts of a step's
    batch touch (sorted, the same on every rank), with sharded data: each
    rank knows only its own examples."""
    if world == 1:
        return np.unique(local)
    n = torch.tensor([len(local)], dtype=torch.int64, device=device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, n)
    most = max(int(t.item()) for t in sizes)
    buf = torch.full((max(most, 1),), -1, dtype=torch.int64, device=device)
    buf[:len(local)] = torch.from_numpy(local).to(device)
    every = [torch.empty_like(buf) for _ in range(world)]
    dist.all_gather(every, buf)
    ids = torch.cat(every).cpu().numpy()
    return np.unique(ids[ids >= 0])


class Share:
    """A rank's share (or rest share) of the training rows: an npy folder
    read whole, or streamed (RETRAIN_SHARD_STREAM=1): npy folders
    part-NNNNN-..., one a piece, each appearing whole in the share's order
    (then .complete). A streamed share is read by a thread of its own as
    its pieces come, whether or not a step needs them yet, so that with a
    window (RETRAIN_SHARD_WINDOW), where it removes each piece once read,
    the host can always write the next: a rank waiting for its peers in a
    collective still frees its window."""

    def __init__(self, path, files, rows, remove=False):
        self.path, self.files, self.rows, self.remove = path, files, rows, remove
        self.data, self.parts, self.error = None, 0, None
        self.pending = {}  # pieces read ahead of one still to come, by index
        self.cond = threading.Condition()

    @classmethod
    def whole(cls, data):
        s = cls("", 0, data.rows)
        s.data = data
        return s

    def start(self, make):
        """Starts reading the pieces, each with make(path) -> fm.Data."""
        self.make = make
        threading.Thread(target=self._read, name=f"share {self.path}", daemon=True).start()

    def loaded(self):
        return self.data.rows if self.data is not None else 0

    def wait(self, n):
        """Waits until the first n rows are in."""
        with self.cond:
            while self.loaded() < n and self.error is None:
                self.cond.wait(1)
            if self.loaded() < n:
                sys.exit(f"{self.path}: {self.error}; want row {n}")

    def _read(self):
        try:
            while self.parts < self.files:
                if not self._next():
                    if os.path.exists(os.path.join(self.path, ".complete")) and not self._next():
                        raise ValueError(f"{self.loaded()} rows in {self.parts} pieces, and .complete: "
                                         f"want {self.files} pieces")
                    time.sleep(0.01)
            if self.loaded() != self.rows:
                raise ValueError(f"{self.loaded()} rows in its {self.files} pieces, the env says {self.rows}")
        except Exception as e:  # the main thread exits naming it
            with self.cond:
                self.error = str(e) or type(e).__name__
                self.cond.notify_all()

    def _next(self):
        """Reads the pieces that are in (a piece can come before an
        earlier one: a row group the rest and the share both need is
        written for both at once), and appends those that follow the
        rows in; reports whether it read any."""
        try:
            names = [e for e in os.listdir(self.path)
                     if e.startswith("part-") and e[5:10].isdigit() and os.path.isdir(os.path.join(self.path, e))]
        except FileNotFoundError:
            return False
        got = False
        for name in sorted(names):
            k = int(name[5:10])
            if k < self.parts or k in self.pending:
                continue  # read already (a window removes it soon)
            path = os.path.join(self.path, name)
            self.pending[k] = self.make(path)
            got = True
            if self.remove:
                shutil.rmtree(path, ignore_errors=True)
        if self.parts not in self.pending:
            return got
        grown = self.data
        n = self.parts
        while n in self.pending:
            part = self.pending.pop(n)
            if grown is None:
                grown = part
            else:
                # A new object: the main thread keeps reading the one it has.
                grown = copy.copy(grown) if grown is self.data else grown
                grown.append(part)
            n += 1
        with self.cond:
            self.data, self.parts = grown, n
            self.cond.notify_all()
        return True


def gather_ints(values, world, device):
    """Every rank's list of len(values) ints, by rank."""
    if world == 1:
        return [list(values)]
    mine = torch.tensor(values, dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    return [[int(v) for v in t.tolist()] for t in every]


def int_env(env, name):
    """A whole number of 0 or more from env, else a clear exit."""
    try:
        v = int(env[name])
    except (KeyError, ValueError):
        sys.exit(f"{name}={env.get(name)!r}: want a whole number")
    if v < 0:
        sys.exit(f"{name}={v}: want 0 or more")
    return v


def save_atomic(obj, path):
    """torch.save, written then renamed: a crash never leaves half a file."""
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def report_comm(rank, world, steps, nbytes, comm_s, loop_s, cpu_s, device):
    """rank 0 prints what the ranks' loops communicated, as a log line:
    "communication: {...}" with the bytes each rank all-reduced per step,
    the seconds each spent in the all-reduce (waiting for the slower ranks
    included) and its share of the loop's time; and the CPU time each rank
    used over the loop's time (below 1 where a rank waited, or where the
    cores are shared with other work)."""
    mine = torch.tensor([comm_s, loop_s, cpu_s], dtype=torch.float64, device=device)
    every = [mine]
    if world > 1:
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
    if rank != 0:
        return
    every = [t.tolist() for t in every]
    record = {"ranks": world, "steps": steps,
              "allreduce_bytes_per_step": round(nbytes / steps) if steps else 0,
              "comm_s": round(every[0][0], 4), "loop_s": round(every[0][1], 4),
              "comm_share": round(every[0][0] / every[0][1], 4) if every[0][1] > 0 else 0.0,
              "comm_share_per_rank": [round(c / l, 4) if l > 0 else 0.0 for c, l, _ in every],
              "cpu_per_rank": [round(u / l, 4) if l > 0 else 0.0 for _, l, u in every]}
    log("communication: " + json.dumps(record))


def shard_plan(args, env, world, device, share, rest, step, resumed, local_batch, stream):
    """The steps of a rank of a sharded gang, planned alike on every rank
    from every rank's share sizes (and rest, and what of it was trained).
    Streamed, a step's rows are not shuffled with the next steps' (each
    step waits only for its own rows)."""
    mine = [share.rows]
    if rest is not None:
        mine += [rest.rows, int_env(env, "RETRAIN_SHARD_REST_DONE"), int_env(env, "RETRAIN_SHARD_REST_EPOCH")]
    every = gather_ints(mine, world, device)
    rest_of = None
    if rest is not None:
        rest_of = (every[0][3], [e[1] for e in every], [e[2] for e in every])
    try:
        segs, warn = shardplan.segments(args.epochs, local_batch, [e[0] for e in every], rest=rest_of,
                                        resumed=resumed, steps_done=step)
    except ValueError as e:
        sys.exit(f"RETRAIN_SHARD_REST_DONE: {e}")
    if warn:
        log(f"warning: {warn}")
    return shardplan.Plan(segs, step, local_batch, 1 if stream else args.checkpoint_every, args.seed, limit=args.steps)


def main():
    args = parse_args()
    # On SIGUSR1 print every thread's stack on stderr: when a rank stops
    # advancing, the node asks each stuck rank where it is, and names the
    # one that is not waiting in a collective for the others.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    env = os.environ
    train_dir = env.get("RETRAIN_TRAIN_DATA")
    if not train_dir:
        sys.exit("RETRAIN_TRAIN_DATA is not set")
    ckpt_dir = env.get("RETRAIN_CHECKPOINT_URI", "")
    resume = env.get("RETRAIN_RESUME_FROM", "")
    model_out = env.get("RETRAIN_MODEL_OUT", "")
    exit_at = [int(v) for v in env.get(EXIT_AT, "").split(":") if v]
    hang_at = [int(v) for v in env.get(HANG_AT, "").split(":") if v]

    world = int(env.get("WORLD_SIZE", "1"))
    distributed = world > 1
    cuda = torch.cuda.is_available()
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
        rank = dist.get_rank()
    else:
        rank = 0
    local = int(env.get("LOCAL_RANK", "0"))
    if cuda:
        if local >= torch.cuda.device_count():
            sys.exit(f"rank {rank} wants GPU {local}, but {torch.cuda.device_count()} are visible: "
                     "give the node at most as many processes as gpus")
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        torch.set_num_threads(args.threads or max(1, cpus // int(env.get("LOCAL_WORLD_SIZE", "1"))))
    log(f"rank {rank} of {world}: pid {os.getpid()}, device {device}")

    # With the node's shard_data, RETRAIN_TRAIN_DATA is this rank's share
    # only: each rank takes its part of every global batch from it, in the
    # share's order (shardplan.py), the rest of an interrupted epoch
    # (RETRAIN_SHARD_REST_DATA) first.
    sharded = "RETRAIN_SHARD_COUNT" in env
    if sharded:
        if int_env(env, "RETRAIN_SHARD_COUNT") != world:
            sys.exit(f"RETRAIN_SHARD_COUNT {env['RETRAIN_SHARD_COUNT']} is not WORLD_SIZE {world}")
    log_ids = env.get(LOG_IDS, "")
    transforms = fm.parse_transforms(args.transforms)
    stream = sharded and env.get("RETRAIN_SHARD_STREAM") == "1"
    if stream:
        # The share's npy pieces arrive while the rank trains: its rows
        # (and its rest's) are planned from the env, each piece read as it
        # comes; the first piece gives the features.
        window = "RETRAIN_SHARD_WINDOW" in env
        share = Share(train_dir, int_env(env, "RETRAIN_SHARD_FILES"), int_env(env, "RETRAIN_SHARD_ROWS"), window)
        rest = None
        if env.get("RETRAIN_SHARD_REST_DATA"):
            rest = Share(env["RETRAIN_SHARD_REST_DATA"], int_env(env, "RETRAIN_SHARD_REST_FILES"),
                         int_env(env, "RETRAIN_SHARD_REST_ROWS"), window)
        first = rest if rest is not None and rest.rows > 0 else share
        first.start(lambda path: fm.Data(path, args.buckets, transforms=transforms, id_column=log_ids))
        first.wait(1)
        data = first.data
        other = rest if first is share else share
        if other is not None:
            other.start(lambda path: fm.Data(path, args.buckets, data.dense_names, data.sparse_names,
                                             data.transforms, id_column=log_ids))
    else:
        data = fm.Data(train_dir, args.buckets, transforms=transforms, id_column=log_ids)
        share, rest = Share.whole(data), None
        rest_dir = env.get("RETRAIN_SHARD_REST_DATA", "") if sharded else ""
        if rest_dir:
            rest = Share.whole(fm.Data(rest_dir, args.buckets, data.dense_names, data.sparse_names, data.transforms,
                                       id_column=log_ids))
    if sharded:
        local_batch = math.ceil(args.batch_size / world)
    else:
        order = Order(data.rows, args.epochs, args.batch_size, args.seed)

    model = fm.FM(len(data.dense_names), args.buckets, args.dim, args.seed).to(device)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr, initial_accumulator_value=0.1)
    step, resumed = 0, None
    if resume and rank != 0 and not os.path.exists(resume):
        # On another host than rank 0's the node may not have put the
        # checkpoint: rank 0's weights, Adagrad state and step come below.
        log(f"rank {rank}: {resume} is not on this host; taking rank 0's state")
    elif resume:
        state = torch.load(resume, map_location=device)
        if state["features"] != [data.dense_names, data.sparse_names]:
            sys.exit(f"checkpoint {resume} has features {state['features']}, the data {[data.dense_names, data.sparse_names]}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        resumed = state.get("shard")  # where the ranks stood in their shares
        if rank == 0:
            log(f"resumed from {resume} at step {step}")
    if distributed:
        # Every rank starts from the same weights (the same seed or
        # checkpoint); rank 0's are broadcast all the same, as DDP does,
        # with its Adagrad state and step, so that no rank can start apart.
        at = torch.tensor([step], dtype=torch.int64, device=device)
        for t in (model.table.data, model.dense.data, model.bias.data, opt.state[model.table]["sum"],
                  opt.state[model.dense]["sum"], opt.state[model.bias]["sum"], at):
            dist.broadcast(t, 0)
        step = int(at.item())
        if sharded:
            box = [resumed]
            dist.broadcast_object_list(box, 0)
            resumed = box[0]
    if sharded:
        plan = shard_plan(args, env, world, device, share, rest, step, resumed, local_batch, stream)
        total = plan.total
    else:
        total = min(order.total, args.steps) if args.steps else order.total
    if rank == 0:
        log(f"{share.rows if sharded else data.rows} examples, dense {data.dense_names}, sparse {data.sparse_names}, "
            f"{world} ranks, {total} steps of {args.batch_size}")
    lr, eps = opt.param_groups[0]["lr"], opt.param_groups[0]["eps"]
    table_state = opt.state[model.table]

    def checkpoint(position):
        path = os.path.join(ckpt_dir, f"step-{step:012d}.pt")
        save_atomic({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                     "features": [data.dense_names, data.sparse_names], "args": vars(args),
                     "shard": position}, path)
        old = sorted(f for f in os.listdir(ckpt_dir) if f.startswith("step-") and f.endswith(".pt"))
        for f in old[:-args.keep_checkpoints]:
            os.remove(os.path.join(ckpt_dir, f))
        return path

    marked = np.zeros(args.buckets, np.bool_)  # prepare's scratch: U as a mask,
    position = np.zeros(args.buckets, np.int64)  # and each row's position in U

    def prepare(step):
        """What step needs from the data, which does not depend on the
        weights (so it is done while the previous step's all-reduce runs):
        U, the table rows the whole global batch touches, sorted, the same
        on every rank; and this rank's examples, their ids as positions in
        U."""
        if sharded:
            return prepare_share(step)
        batch = order.batch_of(step)
        # The batch grouped by rank, rank r's examples (batch[r::world])
        # being grouped[lo:hi]: its rows are then one slice of the batch's.
        grouped = np.concatenate([batch[r::world] for r in range(world)]) if world > 1 else batch
        lo = sum(len(batch[r::world]) for r in range(rank))
        hi = lo + len(batch[rank::world])
        gathered = data.gather(grouped)
        for rows, _ in gathered:
            marked[rows] = True
        touched = np.flatnonzero(marked)
        marked[touched] = False
        position[touched] = np.arange(len(touched))
        weight = np.ones(hi - lo, np.float32)
        if lo == hi:
            # A short last batch may leave a rank nothing; it still takes
            # part in the all-reduce, with a weightless row.
            lo, hi, weight = 0, 1, np.zeros(1, np.float32)
        x, bags, y = data.batch(grouped, device, gathered, lo, hi, remap=position)
        return len(batch), torch.from_numpy(touched).to(device), x, bags, y, torch.from_numpy(weight).to(device)

    def prepare_share(step):
        """prepare with sharded data: this rank's part of the step's batch
        is its own, the plan's rows of its share (or rest share); U, the
        rows the whole batch touches, is gathered from every rank's."""
        seg = plan.segs[plan.seg_of(step)]
        src = rest if seg.phase == shardplan.REST else share
        batch = plan.rows(step, rank)
        weight = np.ones(len(batch), np.float32)
        if len(batch):
            src.wait(int(batch.max()) + 1)
        d = src.data
        if log_ids:
            got = [int(v) for v in d.ids[batch]] if len(batch) else []
            log(f"shard-step world={world} phase={seg.phase} epoch={seg.epoch} rank={rank} step={step + 1} "
                f"count={len(got)} sum={sum(got)} sumsq={sum(v * v for v in got)}")
        if len(batch) == 0:
            # Past its rows of the epoch: a weightless row of the data
            # read first (a rest share may have none).
            d, batch, weight = data, np.zeros(1, np.int64), np.zeros(1, np.float32)
        gathered = d.gather(batch)
        local = np.unique(np.concatenate([rows for rows, _ in gathered])) if gathered else np.zeros(0, np.int64)
        touched = all_touched(local.astype(np.int64), world, device)
        position[touched] = np.arange(len(touched))
        x, bags, y = d.batch(batch, device, gathered, remap=position)
        return int(weight.sum()) * world, torch.from_numpy(touched).to(device), x, bags, y, torch.from_numpy(weight).to(device)

    since, seen = time.monotonic(), 0
    comm_s, comm_bytes, steps_run, loop_start, cpu_start = 0.0, 0, 0, time.perf_counter(), time.process_time()
    width = model.table.shape[1]
    ahead = prepare(step) if step < total else None
    while step < total:
        n_batch, touched, x, bags, y, w = ahead
        # The rows U as a tensor of their own: the gradient is |U| rows.
        sub = model.table.detach().index_select(0, touched).requires_grad_()
        old_rows = sub.detach()
        ll = F.binary_cross_entropy_with_logits(model(x, bags, table=sub), y, reduction="none")
        loss_sum = (ll * w).sum()
        opt.zero_grad(set_to_none=True)
        loss_sum.backward()
        grads = [sub.grad if sub.grad is not None else torch.zeros_like(sub),
                 model.dense.grad if model.dense.grad is not None else torch.zeros_like(model.dense),
                 model.bias.grad]
        # One buffer: the gradients of U's rows, the dense weights and the
        # bias, then the loss and the examples' weight, summed over ranks.
        flat = torch.cat([g.reshape(-1) for g in grads] + [torch.stack([loss_sum.detach(), w.sum()])])
        work = dist.all_reduce(flat, async_op=True) if distributed else None
        ahead = prepare(step + 1) if step + 1 < total else None
        if work is not None:
            t0 = time.perf_counter()
            wait_all_reduce(work)
            comm_s += time.perf_counter() - t0
            comm_bytes += flat.numel() * flat.element_size()
        n_rows = sub.numel()
        g_rows = flat[:n_rows].view(-1, width)
        g_dense = flat[n_rows:n_rows + model.dense.numel()]
        g_bias = flat[n_rows + model.dense.numel():-2]
        stats = flat[-2:].double()
        if args.l2 > 0:
            # L2 on the weights the step updates (not the bias): the
            # gradient of l2/2 (|dense|^2 + |rows U|^2).
            g_rows = g_rows.add(old_rows, alpha=args.l2)
            g_dense = g_dense.add(model.dense.detach(), alpha=args.l2)
        with torch.no_grad():
            # Adagrad on the rows U, as torch.optim.Adagrad updates a
            # dense tensor (state += g^2; w -= lr g / (sqrt(state) + eps))
            # and as it does with a sparse gradient: the rows a step does
            # not touch keep their weights and accumulators.
            acc = table_state["sum"].index_select(0, touched).addcmul_(g_rows, g_rows)
            table_state["sum"].index_copy_(0, touched, acc)
            new_rows = torch.addcdiv(old_rows, g_rows, acc.sqrt().add_(eps), value=-lr)
            model.table.index_copy_(0, touched, new_rows)
            table_state["step"] += 1
        model.dense.grad, model.bias.grad = g_dense.view_as(model.dense), g_bias.view_as(model.bias)
        opt.step()  # the dense weights and the bias; the table has no .grad
        steps_run += 1
        step += 1
        seen += n_batch

        loss = (stats[0] / stats[1]).item()
        saving = bool(ckpt_dir) and (step % args.checkpoint_every == 0 or step == total)
        if rank == 0 and (step % args.log_every == 0 or saving or step == total or not math.isfinite(loss)):
            with torch.no_grad():
                norm = new_rows.norm(dim=1).max().item() if len(touched) else 0.0
            now = time.monotonic()
            record = {"step": step, "total": total, "loss": loss, "emb_max_norm": norm,
                      "examples_per_sec": seen / max(now - since, 1e-9)}
            since, seen = now, 0
            if saving:
                pos = plan.position(step) if sharded else None
                record["checkpoint"] = checkpoint(pos)
                if pos is not None:
                    # Where the ranks stand in their shares (docs/training.md).
                    record.update(shard_epoch=pos["epoch"], shard_done=pos["done"])
            emit(**record)
        elif rank != 0 and step % args.log_every == 0:
            # The other ranks' steps: the node stops every rank when one
            # stops advancing, and names it.
            emit(step=step)
        if not math.isfinite(loss):
            # The node's guard has stopped on the progress line already.
            print(f"loss is {loss} at step {step}: diverged", file=sys.stderr, flush=True)
            sys.exit(3)
        if exit_at and exit_at[0] == rank and exit_at[1] == step:
            code = exit_at[2] if len(exit_at) > 2 else 7
            print(f"exiting with code {code} after step {step} ({EXIT_AT})", file=sys.stderr, flush=True)
            os._exit(code)
        if hang_at and hang_at[0] == rank and hang_at[1] == step:
            print(f"rank {rank} stops advancing after step {step} ({HANG_AT})", file=sys.stderr, flush=True)
            time.sleep(10 ** 6)

    loop_s = time.perf_counter() - loop_start
    report_comm(rank, world, steps_run, comm_bytes, comm_s, loop_s, time.process_time() - cpu_start, device)

    if rank == 0:
        if model_out:
            os.makedirs(model_out, exist_ok=True)
            save_atomic({"model": model.state_dict(), "step": step}, os.path.join(model_out, "model.pt"))
            with open(os.path.join(model_out, "meta.json"), "w") as f:
                json.dump(dict(fm.meta(args, data), steps=step, seed=args.seed), f, indent=1)
            log(f"model written to {model_out}")
        eval_dir = env.get("RETRAIN_EVAL_DATA")
        if eval_dir and os.path.exists(os.path.join(eval_dir, "schema.json")):
            ev = fm.Data(eval_dir, args.buckets, data.dense_names, data.sparse_names, data.transforms)
            model.eval()
            z = fm.predict(model, ev, device)
            emit(step=step, eval_auc=fm.auc(z.numpy(), ev.label), eval_log_loss=fm.log_loss(z, ev.label))
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
