"""Which rows of its share a rank of a sharded gang trains at each step.

train.py uses this with the node's shard_data (RETRAIN_SHARD_COUNT set).
It needs numpy only, so that its tests need not import torch.

The contract (docs/training.md, "Sharded data"): a checkpoint's progress
line says, in shard_epoch and shard_done, how many rows of its share of
that epoch (of its rest share, in the rest of an interrupted epoch) each
rank had trained, counted in the share's own row order; a gang resumed
with another world size then trains the rest of that epoch, the rows no
rank had trained. So a rank trains its share in the share's order (npy
array order), a global batch of B rows being batch-size / WORLD_SIZE rows
of each rank's share, and shuffles only within what it trains between two
checkpoints: at every checkpoint the rows it trained are a prefix of its
share.

The steps are planned as segments, one per epoch (the first possibly the
rest of an interrupted epoch, or an epoch resumed part way): a segment
runs as many steps as the rank with the most rows left needs, so the
synchronous ranks run the same steps; a rank whose rows of the segment are
all trained takes part with a weightless row.
"""

import math

import numpy as np

FULL, REST = "full", "rest"
_PHASE_SEED = {FULL: 0, REST: 1}


class Segment:
    """Rows a gang trains of one epoch: each rank r rows [start[r], rows[r])
    of its share (its rest share, phase REST), in steps of batch rows."""

    def __init__(self, phase, epoch, rows, start, batch):
        if len(rows) != len(start):
            raise ValueError(f"{len(rows)} shares but {len(start)} positions")
        self.phase, self.epoch = phase, int(epoch)
        self.rows = [int(r) for r in rows]
        self.start = [int(s) for s in start]
        for r, (n, s) in enumerate(zip(self.rows, self.start)):
            if not 0 <= s <= n:
                raise ValueError(f"rank {r} has trained {s} rows of a share of {n} in epoch {epoch} ({phase})")
        self.steps = max((math.ceil((n - s) / batch) for n, s in zip(self.rows, self.start)), default=0)


def segments(epochs, batch, rows, rest=None, resumed=None, steps_done=0):
    """The segments a gang of len(rows) ranks trains, and a warning (or
    None) where it cannot keep every row of an epoch once.

    rows: each rank's share of an epoch. rest: (epoch, rows, done), each
    rank's share of the rest of an interrupted epoch and the rows of it
    trained (RETRAIN_SHARD_REST_*): trained first. resumed: the position a
    checkpoint recorded, {"world", "phase", "epoch", "done"}, or None;
    steps_done: the checkpoint's step (for a checkpoint that recorded no
    position)."""
    world, warn = len(rows), None
    zero = [0] * world
    if rest is not None:
        epoch, rest_rows, rest_done = rest
        first = [Segment(REST, epoch, rest_rows, rest_done, batch)]
        nxt = int(epoch) + 1
    elif resumed and resumed.get("world") == world and resumed.get("phase") == FULL:
        first = [Segment(FULL, resumed["epoch"], rows, resumed["done"], batch)]
        nxt = int(resumed["epoch"]) + 1
    elif resumed:
        # Another world size (or the rest of an epoch) and no rest given:
        # the epoch starts afresh, some of its rows trained twice.
        first, nxt = [], int(resumed["epoch"])
        warn = (f"the checkpoint stood at {resumed.get('phase')} epoch {resumed['epoch']} with "
                f"{resumed.get('world')} ranks and the node gave no rest of it: epoch {nxt} starts afresh")
    elif steps_done > 0:
        per_epoch = max(Segment(FULL, 0, rows, zero, batch).steps, 1)
        first, nxt = [], steps_done // per_epoch
        warn = f"the checkpoint of step {steps_done} says nothing of the shares: epoch {nxt} starts afresh"
    else:
        first, nxt = [], 0
    return first + [Segment(FULL, e, rows, zero, batch) for e in range(nxt, epochs)], warn


class Plan:
    """The steps of a sharded rank: step index i (0-based, global, counting
    the steps a resumed run had made before first) trains rows(i, rank)
    of segment seg_of(i).

    Within a segment a rank's rows are its share's in order, shuffled only
    within a window: the steps between two checkpoints (every `every`
    steps, and at total), cut at the segment's ends."""

    def __init__(self, segs, first, batch, every, seed, limit=0):
        self.segs, self.first, self.batch, self.every, self.seed = segs, first, batch, every, seed
        self.bounds = [first]
        for s in segs:
            self.bounds.append(self.bounds[-1] + s.steps)
        self.total = min(self.bounds[-1], limit) if limit else self.bounds[-1]
        self._window = None

    def seg_of(self, i):
        """The index of the segment step index i is in."""
        for k, s in enumerate(self.segs):
            if self.bounds[k] <= i < self.bounds[k + 1]:
                return k
        raise IndexError(f"step index {i} is outside the plan [{self.first}, {self.bounds[-1]})")

    def rows(self, i, rank):
        """Positions in its share (rest share) of the rows rank trains at
        step index i: at most batch of them, none when its rows of the
        segment are done."""
        k = self.seg_of(i)
        seg, g0 = self.segs[k], self.bounds[k]
        lo = max(g0, i // self.every * self.every)
        hi = min(self.bounds[k + 1], (i // self.every + 1) * self.every, self.total)
        key = (k, lo, rank)
        if self._window is None or self._window[0] != key:
            n, s = seg.rows[rank], seg.start[rank]
            a, b = min(n, s + (lo - g0) * self.batch), min(n, s + (hi - g0) * self.batch)
            rng = np.random.default_rng([self.seed, seg.epoch, _PHASE_SEED[seg.phase], rank, lo])
            self._window = (key, a + rng.permutation(b - a))
        off = (i - lo) * self.batch
        return self._window[1][off:off + self.batch]

    def position(self, n):
        """Where the ranks stand after n steps (n >= first): the segment's
        {"phase", "epoch", "done"}, done being each rank's rows of it
        trained, a prefix of its share wherever n ends a window; None
        without segments."""
        if not self.segs:
            return None
        if n <= self.first:
            k = 0
        else:
            k = self.seg_of(n - 1)
        seg, g0 = self.segs[k], self.bounds[k]
        done = [min(r, s + (n - g0) * self.batch) for r, s in zip(seg.rows, seg.start)]
        return {"world": len(seg.rows), "phase": seg.phase, "epoch": seg.epoch, "done": done}
