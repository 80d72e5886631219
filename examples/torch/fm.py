"""The model and data code train.py and evaluate.py share.

The model mirrors retrain's builtin trainer (internal/trainer): a
factorization machine over hashed ids plus linear dense features,

    score(x) = b + sum_j w_j x_j + sum_f e_f[0] + 1/2 (|sum_f v_f|^2 - sum_f |v_f|^2)

where each sparse feature f's ids are hashed with f's index into one shared
table of `buckets` rows [w, v_1..v_dim] and e_f is the mean of its ids'
rows (an empty feature contributes nothing). The id hashing and the initial
weights are the builtin's, bit for bit: the same seed starts from the same
table. Dense features get the builtin's per-feature transforms (log,
log1p, logit; train.py --transforms, recorded in meta.json for
evaluate.py), and a missing (NaN) dense value counts as 0 after them.

Data is a split dataset in retrain's npy layout (the train node's
`data_format: npy`): schema.json, label.npy, dense.npy and, per sparse
feature NAME, sparse.NAME.values.npy with sparse.NAME.offsets.npy (the
torch.nn.EmbeddingBag layout: row i's ids are values[offsets[i]:offsets[i+1]]).
"""

import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HASH_VERSION = 1  # the builtin model format's id hashing
MODEL_FORMAT = "retrain-torch-fm"
_GOLDEN = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1


def mix64(x):
    """splitmix64's finalizer (internal/splitmix) on a uint64 array."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def bucket(ids, field, buckets):
    """Table rows of the int64 ids of sparse feature number `field`, as the
    builtin's Model.bucket computes them: the id salted with the feature,
    mixed, mapped to [0, buckets) by a multiply-shift."""
    salt = np.uint64(((field + 1) * _GOLDEN) & _M64)
    h = mix64(ids.astype(np.uint64) ^ salt)
    with np.errstate(over="ignore"):
        return (((h >> np.uint64(32)) * np.uint64(buckets)) >> np.uint64(32)).astype(np.int64)


def init_table(buckets, dim, seed, std=0.01):
    """The builtin's initial table: embedding weights uniform with standard
    deviation std drawn from a hash of the seed and the weight's index,
    linear weights 0."""
    width = 1 + dim
    if dim == 0 or std == 0:
        return np.zeros((buckets, width), dtype=np.float32)
    i = np.arange(buckets * width, dtype=np.uint64)
    u = (mix64(np.uint64(seed) ^ mix64(i)) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    t = ((2 * u - 1) * (math.sqrt(3) * std)).astype(np.float32)
    t[::width] = 0
    return t.reshape(buckets, width)


class FM(nn.Module):
    """The factorization machine; `table` row r is [w, v_1..v_dim]."""

    def __init__(self, n_dense, buckets, dim, seed=None):
        super().__init__()
        self.dim = dim
        # seed None: zeros, for a model whose weights are loaded next.
        table = init_table(buckets, dim, seed) if seed is not None else np.zeros((buckets, 1 + dim), np.float32)
        self.table = nn.Parameter(torch.from_numpy(table))
        self.dense = nn.Parameter(torch.zeros(n_dense))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x, bags, table=None):
        """Scores (log-odds) of a batch of B examples: x (B, n_dense) and
        bags, the table rows of every sparse feature packed as one
        EmbeddingBag input (ids, offsets) of features x B bags,
        feature-major (bag f*B + i is feature f of example i; Data.batch
        packs them), or None without sparse features. table, when given,
        stands for self.table: the rows the ids index (train.py passes the
        rows a step touches, as a tensor of their own, so that their
        gradient is those rows only)."""
        table = self.table if table is None else table
        s = self.bias + x @ self.dense
        if bags is not None and len(x):
            ids, offsets = bags
            pooled = F.embedding_bag(ids, table, offsets, mode="mean").view(-1, x.shape[0], table.shape[1])
            s = s + pooled[:, :, 0].sum(0)  # pooled: (features, B, 1+dim)
            if self.dim > 0:
                v = pooled[:, :, 1:]
                s = s + 0.5 * (v.sum(0).pow(2).sum(1) - v.pow(2).sum((0, 2)))
        return s


TRANSFORMS = ("identity", "log", "log1p", "logit")


def transform(x, name):
    """A dense feature's transform, as retrain's builtin trainer applies it
    (internal/trainer: log of a scale, logit of a rate); NaN stays NaN."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if name == "log":
            return np.log(np.maximum(x.astype(np.float64), 1e-6)).astype(np.float32)
        if name == "log1p":
            return np.log1p(np.maximum(x.astype(np.float64), 0)).astype(np.float32)
        if name == "logit":
            p = np.clip(x.astype(np.float64), 1e-4, 1 - 1e-4)
            return np.log(p / (1 - p)).astype(np.float32)
    if name != "identity":
        raise SystemExit(f"transform {name!r}: want one of {', '.join(TRANSFORMS)}")
    return x


def parse_transforms(text):
    """--transforms "a=log,b=logit" as a dict."""
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        name, _, t = part.partition("=")
        if t not in TRANSFORMS:
            raise SystemExit(f"--transforms {part!r}: want FEATURE=TRANSFORM with TRANSFORM one of {', '.join(TRANSFORMS)}")
        out[name] = t
    return out


class Data:
    """A split dataset in the npy layout, with its sparse ids hashed to
    table rows. dense and sparse name the model's features in its order (by
    default the data's); a feature the data lacks is missing in every row."""

    def __init__(self, path, buckets, dense=None, sparse=None, transforms=None, id_column=None):
        schema_path = os.path.join(path, "schema.json")
        if not os.path.exists(schema_path):
            raise SystemExit(f"{path} has no schema.json: give the node data_format: npy")
        with open(schema_path) as f:
            self.schema = json.load(f)
        self.rows = int(self.schema["rows"])
        self.dense_names = list(self.schema["dense"] if dense is None else dense)
        self.transforms = dict(transforms or {})
        self.sparse_names = list(self.schema["sparse"] if sparse is None else sparse)
        self.label = np.load(os.path.join(path, "label.npy")).astype(np.float32)
        have = np.load(os.path.join(path, "dense.npy")).reshape(self.rows, len(self.schema["dense"]))
        x = np.zeros((self.rows, len(self.dense_names)), dtype=np.float32)
        for j, name in enumerate(self.dense_names):
            if name in self.schema["dense"]:
                x[:, j] = have[:, self.schema["dense"].index(name)]
        for j, name in enumerate(self.dense_names):
            t = (transforms or {}).get(name, "identity")
            x[:, j] = transform(x[:, j], t)
        self.x = np.where(np.isnan(x), np.float32(0), x)  # a missing value counts as 0
        self.sparse = []  # per feature: (table rows of its ids, offsets)
        for f, name in enumerate(self.sparse_names):
            if name in self.schema["sparse"]:
                ids = np.load(os.path.join(path, f"sparse.{name}.values.npy"))
                offsets = np.load(os.path.join(path, f"sparse.{name}.offsets.npy")).astype(np.int64)
            else:
                ids, offsets = np.zeros(0, np.int64), np.zeros(self.rows + 1, np.int64)
            self.sparse.append((bucket(ids, f, buckets), offsets))
        # id_column: an int column to keep (train.py's TRAIN_PY_LOG_IDS).
        self.ids = None
        if id_column:
            self.ids = np.load(os.path.join(path, id_column + ".npy")).astype(np.int64).reshape(-1) \
                if self.rows else np.zeros(0, np.int64)

    def append(self, other):
        """Appends the rows of other, a Data of the same features (a
        streamed share's next piece)."""
        self.label = np.concatenate([self.label, other.label])
        self.x = np.concatenate([self.x, other.x])
        self.sparse = [(np.concatenate([rows, more]), np.concatenate([offsets[:-1], more_offsets + offsets[-1]]))
                       for (rows, offsets), (more, more_offsets) in zip(self.sparse, other.sparse)]
        if self.ids is not None:
            self.ids = np.concatenate([self.ids, other.ids])
        self.rows += other.rows

    def gather(self, idx):
        """The table rows of examples idx, per sparse feature: (rows,
        bounds), example idx[i]'s rows being rows[bounds[i]:bounds[i+1]]."""
        return [_gather(rows, offsets, idx) for rows, offsets in self.sparse]

    def batch(self, idx, device, gathered=None, lo=0, hi=None, remap=None):
        """Tensors of examples idx[lo:hi] (all of idx by default): dense
        (B, D), bags (FM.forward's packed pair, None without sparse
        features), labels (B). gathered is self.gather(idx) where the
        caller has it already. With remap (an array over the table's rows),
        the bags' ids are remap[row] instead of the table rows."""
        hi = len(idx) if hi is None else hi
        ids, starts, n = [], [], 0
        for f_rows, bounds in (self.gather(idx[lo:hi]) if gathered is None else gathered):
            if gathered is not None:
                f_rows, bounds = f_rows[bounds[lo]:bounds[hi]], bounds[lo:hi + 1] - bounds[lo]
            ids.append(f_rows)
            starts.append(bounds[:-1] + n)
            n += len(f_rows)
        bags = None
        if ids:
            ids = np.concatenate(ids)
            if remap is not None:
                ids = remap[ids]
            bags = (torch.from_numpy(ids).to(device), torch.from_numpy(np.concatenate(starts)).to(device))
        return (torch.from_numpy(self.x[idx[lo:hi]]).to(device), bags,
                torch.from_numpy(self.label[idx[lo:hi]]).to(device))


def _gather(values, offsets, idx):
    """The values of rows idx of a ragged column, and where each row's
    begin and end (len(idx) + 1 bounds)."""
    starts = offsets[idx]
    lens = offsets[idx + 1] - starts
    new = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lens, out=new[1:])
    flat = np.repeat(starts - new[:-1], lens) + np.arange(new[-1], dtype=np.int64)
    return values[flat], new


def predict(model, data, device, batch=65536):
    """Scores (log-odds) of every row of data, in order."""
    out = []
    with torch.no_grad():
        for lo in range(0, data.rows, batch):
            idx = np.arange(lo, min(lo + batch, data.rows))
            x, bags, _ = data.batch(idx, device)
            out.append(model(x, bags).float().cpu())
    return torch.cat(out) if out else torch.zeros(0)


def auc(scores, labels):
    """Area under the ROC curve, ties counted half; NaN without both
    classes."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels) == 1
    pos = int(labels.sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    _, inverse, counts = np.unique(scores[order], return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = ((ends - counts + 1 + ends) / 2.0)[inverse]  # average rank of a tie
    return float((ranks[labels[order]].sum() - pos * (pos + 1) / 2) / (pos * neg))


def log_loss(logits, labels):
    """Mean log loss of log-odds, computed without overflow."""
    if len(labels) == 0:
        return float("nan")
    z, y = torch.as_tensor(logits, dtype=torch.float64), torch.as_tensor(labels, dtype=torch.float64)
    return float(F.binary_cross_entropy_with_logits(z, y))


def meta(args, data):
    """meta.json of a model: what evaluate.py needs to rebuild it."""
    return {"format": MODEL_FORMAT, "version": 1, "hash_version": HASH_VERSION,
            "dim": args.dim, "buckets": args.buckets,
            "dense": data.dense_names, "sparse": data.sparse_names,
            "transforms": dict(data.transforms)}


def load_model(model_dir, device):
    """The model train.py wrote to model_dir, and its meta.json."""
    with open(os.path.join(model_dir, "meta.json")) as f:
        m = json.load(f)
    if m.get("format") != MODEL_FORMAT or m.get("hash_version") != HASH_VERSION:
        raise SystemExit(f"{model_dir}: not a {MODEL_FORMAT} model with hash version {HASH_VERSION}: {m}")
    state = torch.load(os.path.join(model_dir, "model.pt"), map_location=device)
    model = FM(len(m["dense"]), m["buckets"], m["dim"]).to(device)
    model.load_state_dict(state["model"])
    model.eval()
    return model, m
