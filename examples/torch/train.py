#!/usr/bin/env python3
"""A retrain command trainer: a small CTR model trained with PyTorch DDP.

It implements retrain's command-trainer contract (see README.md):

* inputs come from the environment: RETRAIN_TRAIN_DATA, RETRAIN_EVAL_DATA,
  RETRAIN_CHECKPOINT_URI, RETRAIN_RESUME_FROM, RETRAIN_MODEL_OUT;
* progress goes to stdout as JSON lines
  {"step": ..., "loss": ..., "emb_max_norm": ..., "checkpoint": ...};
  everything else printed is an ordinary log line;
* a run started with RETRAIN_RESUME_FROM continues at that checkpoint's step.

Run it with torchrun (one process per GPU, or on CPU with gloo):

    torchrun --nproc_per_node 2 train.py

or as a single process: python3 train.py.

The model mirrors retrain's builtin trainer: a factorization machine over
hashed ids (one shared table, row = [linear weight, embedding]) plus linear
dense features, trained with Adagrad on the summed log loss.
"""

import argparse
import io
import json
import math
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

NOT_FEATURES = {"request_id", "event_ts", "date", "ts"}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--label", default="label")
    p.add_argument("--id-cols", default="user_id,ad_id",
                   help="integer id columns; list<int> columns are found by themselves")
    p.add_argument("--dense-cols", default="",
                   help="dense columns (default: every other numeric column)")
    p.add_argument("--buckets", type=int, default=1 << 18)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=1024, help="global batch, over all ranks")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


# --- storage: local paths and s3:// through pyarrow's filesystems ---------

def resolve(uri):
    """Returns (filesystem, path) for a local path, file:// or s3:// URI.

    S3 credentials and endpoint come from the usual AWS environment
    variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    AWS_ENDPOINT_URL for a non-AWS endpoint such as retrain's dev stack).
    """
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if uri.startswith("s3://") and os.environ.get("AWS_ENDPOINT_URL"):
        fs = pafs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"])
        return fs, uri[len("s3://"):]
    return pafs.FileSystem.from_uri(uri)


def write_bytes(uri, data):
    fs, path = resolve(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        # Write then rename, so a crash never leaves half a checkpoint.
        fs.create_dir(os.path.dirname(path), recursive=True)
        tmp = path + ".tmp"
        with fs.open_output_stream(tmp) as f:
            f.write(data)
        os.replace(tmp, path)
    else:
        with fs.open_output_stream(path) as f:  # an S3 put is atomic
            f.write(data)


def read_bytes(uri):
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        return f.read()


def join(prefix, name):
    return prefix.rstrip("/") + "/" + name


# --- data -------------------------------------------------------------------

def mix(h):
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def bucket(ids, field, buckets):
    """Hashes int ids of sparse feature `field` to table rows."""
    salt = np.uint64(((field + 1) * 0x9E3779B97F4A7C15) % (1 << 64))
    return (mix(ids.astype(np.uint64) ^ salt) % np.uint64(buckets)).astype(np.int64)


def load(uri, args, schema=None):
    """Reads Parquet data into tensors: dense (N, D), one (N, L) tensor of
    table rows per sparse feature (padded with row `buckets`), labels (N)."""
    fs, path = resolve(uri)
    table = pads.dataset(path, filesystem=fs, format="parquet").to_table()
    if schema is None:
        ids = [c for c in args.id_cols.split(",") if c]
        lists = [f.name for f in table.schema
                 if pa.types.is_list(f.type) and pa.types.is_integer(f.type.value_type)]
        if args.dense_cols:
            dense = args.dense_cols.split(",")
        else:
            skip = set(ids) | set(lists) | NOT_FEATURES | {args.label}
            dense = [f.name for f in table.schema if f.name not in skip
                     and (pa.types.is_floating(f.type) or pa.types.is_integer(f.type))]
        schema = {"dense": dense, "sparse": ids + lists}
    n = table.num_rows
    x = np.zeros((n, len(schema["dense"])), dtype=np.float32)
    for j, c in enumerate(schema["dense"]):
        x[:, j] = table.column(c).to_numpy().astype(np.float32)
    x = np.nan_to_num(x, nan=0.0)  # a null feature contributes nothing
    sparse = []
    for f, c in enumerate(schema["sparse"]):
        col = table.column(c).combine_chunks()
        if pa.types.is_list(col.type):
            lens = col.value_lengths().fill_null(0).to_numpy()
            width = max(int(lens.max()) if n else 0, 1)
            rows = np.full((n, width), args.buckets, dtype=np.int64)
            flat = bucket(col.flatten().to_numpy(zero_copy_only=False), f, args.buckets)
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
            for k in range(width):
                has = lens > k
                rows[has, k] = flat[starts[has] + k]
        else:
            valid = col.is_valid().to_numpy(zero_copy_only=False)
            vals = col.fill_null(0).to_numpy(zero_copy_only=False)
            rows = np.where(valid, bucket(vals, f, args.buckets), args.buckets)[:, None]
        sparse.append(torch.from_numpy(rows))
    y = table.column(args.label).to_numpy().astype(np.float32)
    return torch.from_numpy(x), sparse, torch.from_numpy(y), schema


# --- model ------------------------------------------------------------------

class FM(nn.Module):
    def __init__(self, n_dense, n_sparse, buckets, dim):
        super().__init__()
        # Row `buckets` is padding: mean pooling leaves it out.
        self.emb = nn.EmbeddingBag(buckets + 1, dim + 1, mode="mean", padding_idx=buckets)
        nn.init.uniform_(self.emb.weight, -0.01 * math.sqrt(3), 0.01 * math.sqrt(3))
        with torch.no_grad():
            self.emb.weight[:, 0] = 0
            self.emb.weight[buckets] = 0
        self.dense = nn.Linear(n_dense, 1)
        nn.init.zeros_(self.dense.weight)
        nn.init.zeros_(self.dense.bias)

    def forward(self, x, sparse):
        pooled = torch.stack([self.emb(rows) for rows in sparse], dim=1)  # (B, F, 1+dim)
        v = pooled[:, :, 1:]
        pairwise = 0.5 * (v.sum(1).pow(2).sum(1) - v.pow(2).sum((1, 2)))
        return self.dense(x).squeeze(1) + pooled[:, :, 0].sum(1) + pairwise


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks of ties
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        ranks[i:j] = (i + 1 + j) / 2
        i = j
    pos = y.sum()
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


# --- training ---------------------------------------------------------------

def emit(**record):
    # json.dumps writes NaN and Infinity bare; retrain's parser reads them.
    print(json.dumps(record), flush=True)


def main():
    args = parse_args()
    env = os.environ
    train_uri = env.get("RETRAIN_TRAIN_DATA")
    if not train_uri:
        sys.exit("RETRAIN_TRAIN_DATA is not set")
    ckpt_prefix = env.get("RETRAIN_CHECKPOINT_URI", "")
    resume = env.get("RETRAIN_RESUME_FROM", "")
    model_out = env.get("RETRAIN_MODEL_OUT", "")

    distributed = "WORLD_SIZE" in env
    if distributed:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    if torch.cuda.is_available():
        local = int(env.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if args.batch_size % world:
        sys.exit(f"batch size {args.batch_size} is not a multiple of {world} ranks")

    x, sparse, y, schema = load(train_uri, args)
    n = len(y)
    steps_per_epoch = math.ceil(n / args.batch_size)
    total = steps_per_epoch * args.epochs
    if rank == 0:
        print(f"{n} examples, features {schema}, {world} ranks on {device}, {total} steps", flush=True)

    torch.manual_seed(args.seed)
    model = FM(len(schema["dense"]), len(schema["sparse"]), args.buckets, args.dim).to(device)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr, initial_accumulator_value=0.1)
    step = 0
    if resume:
        state = torch.load(io.BytesIO(read_bytes(resume)), map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
        if rank == 0:
            print(f"resumed from {resume} at step {step}", flush=True)
    ddp = DDP(model) if distributed else model

    def save():
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "step": step, "schema": schema, "args": vars(args)}, buf)
        uri = join(ckpt_prefix, f"step-{step:012d}.pt")
        write_bytes(uri, buf.getvalue())
        return uri

    loss_fn = nn.BCEWithLogitsLoss(reduction="sum")
    while step < total:
        # The order of an epoch depends on the seed and the epoch only, so a
        # resumed run reads the batches an uninterrupted one would have.
        epoch, k = divmod(step, steps_per_epoch)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed * 1_000_003 + epoch))
        batch = perm[k * args.batch_size:(k + 1) * args.batch_size][rank::world]
        xb = x[batch].to(device)
        sb = [s[batch].to(device) for s in sparse]
        yb = y[batch].to(device)
        loss = loss_fn(ddp(xb, sb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1

        # Every rank must take the same branches: they meet in collectives.
        saving = bool(ckpt_prefix) and (step % args.checkpoint_every == 0 or step == total)
        ckpt = None
        if saving:
            if rank == 0:
                ckpt = save()
            if distributed:
                dist.barrier()
        if step % args.log_every == 0 or saving or step == total:
            stats = torch.stack([loss.detach(), torch.tensor(float(len(batch)), device=device)])
            if distributed:
                dist.all_reduce(stats)
            if rank == 0:
                norm = model.emb.weight.detach().norm(dim=1).max().item()
                record = {"step": step, "loss": (stats[0] / stats[1]).item(), "emb_max_norm": norm}
                if ckpt:
                    record["checkpoint"] = ckpt
                emit(**record)

    if rank == 0:
        eval_uri = env.get("RETRAIN_EVAL_DATA")
        if eval_uri:
            ex, es, ey, _ = load(eval_uri, args, schema)
            with torch.no_grad():
                p = torch.sigmoid(model(ex.to(device), [s.to(device) for s in es])).cpu().numpy()
            yy = ey.numpy()
            q = np.clip(np.where(yy == 1, p, 1 - p), 1e-15, 1)
            emit(step=step, eval_auc=auc(p, yy), eval_log_loss=float(-np.log(q).mean()))
        if model_out:
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "schema": schema,
                        "buckets": args.buckets, "dim": args.dim}, buf)
            write_bytes(model_out, buf.getvalue())
            print(f"model written to {model_out}", flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
