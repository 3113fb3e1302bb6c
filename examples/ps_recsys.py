# SPDX-License-Identifier: MIT
"""A small recommendation model trained through collstack: the sparse
embedding table through the parameter server, the dense layers through
allreduce, in the same job.

A click-through task: every sample is one key per field (user, item,
category; one shared table, each field its own key range), the label comes
from a hidden model of the same shape. The model concatenates the three
embedding rows (DIM values each), then a ReLU layer of HIDDEN units and a
logistic output.

Every step t, each rank takes its slice of the global batch and
  1. pulls its samples' rows at clock t (sync: every rank's pushes of the
     versions before t are applied),
  2. computes the loss and the gradients (numpy, f32),
  3. posts the embedding gradients as version t (the worker sums a key's
     duplicates; the shards sum the ranks' rows and apply Adagrad),
  4. meanwhile allreduces the dense gradients and the loss, and updates
     the dense layers (SGD) like every other rank.
The dense gradients are allreduced as 64-bit fixed-point integers
(2^-32 units), a sum whose result does not depend on the order the
sidecars add in, so the comparison below tests the parameter server, not
float summation order.

At the end rank 0 pulls the whole table and reruns the same training in
this one process (no collstack: the same data, the ranks' slices computed
one after the other, duplicates and ranks summed in the order the worker
and the sync shards sum them, Adagrad in f32), and compares the two tables
bit for bit. It prints

  ps_recsys ok ranks=N steps=S loss_first=A loss_last=B loss_down=True
    table_equal_reference=True rows=K differing_values=0

Run it with collstack launch (RANK, WORLD_SIZE, ... and COLLSTACK_SOCKET):

  collstack launch -T 1 -- /usr/bin/python3 examples/ps_recsys.py --steps 30

or the reference alone: python3 examples/ps_recsys.py --reference --ranks 4
Needs numpy (Debian: python3-numpy, /usr/bin/python3).
"""

import argparse
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one summation order
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))

FIELDS = (200, 300, 20)          # users, items, categories
OFFS = np.cumsum((0,) + FIELDS[:-1]).astype(np.uint64)
KEYS = sum(FIELDS)
DIM, HIDDEN = 8, 16
BATCH = 256                      # global, split over the ranks
EMB_LR, EMB_EPS, INIT_SCALE, INIT_SEED = 0.05, 1e-10, 0.1, 11
DENSE_LR = 0.5
FIX = float(2 ** 32)             # fixed point of the dense allreduce
F32 = np.float32

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def init_row(key):
    """The table's uniform initializer (collectives/ps/ps_table.c,
    cs_ps_init_row: a pure function of seed and key; table id 0)."""
    base = mix64(INIT_SEED ^ mix64(0x5053)) ^ mix64(~key & M64)
    row = np.empty(DIM, F32)
    for j in range(DIM):
        r = mix64((base + 0x9e3779b97f4a7c15 * (j + 1)) & M64)
        u = (r >> 11) * 2.0 ** -53
        row[j] = F32((2.0 * u - 1.0) * float(F32(INIT_SCALE)))
    return row


def hidden_model():
    rng = np.random.RandomState(3)
    return [rng.standard_normal(n) for n in FIELDS]


def batch(step, truth):
    """The global batch of a step: keys (BATCH, 3) and labels."""
    rng = np.random.RandomState(1000 + step)
    cols = [rng.zipf(1.3, BATCH) % n for n in FIELDS]
    score = sum(t[c] for t, c in zip(truth, cols))
    y = (score + 0.3 * rng.standard_normal(BATCH) > 0).astype(F32)
    keys = np.stack([c.astype(np.uint64) + o for c, o in zip(cols, OFFS)],
                    axis=1)
    return keys, y


def dense_init():
    rng = np.random.RandomState(5)
    w1 = (rng.standard_normal((len(FIELDS) * DIM, HIDDEN)) * 0.3).astype(F32)
    w2 = (rng.standard_normal(HIDDEN) * 0.3).astype(F32)
    return [w1, np.zeros(HIDDEN, F32), w2, np.zeros(1, F32)]


def grads(dense, rows, y):
    """Loss sum and gradients of one rank's samples (scaled by the global
    batch): embedding rows (n x 3, DIM), dense (flat, f64), loss sum."""
    w1, b1, w2, b2 = dense
    b = len(y)
    x = rows.reshape(b, len(FIELDS) * DIM)
    h = np.maximum(x @ w1 + b1, F32(0))
    z = h @ w2 + b2[0]
    p = F32(1) / (F32(1) + np.exp(-z))
    loss = float(np.sum(np.logaddexp(0.0, z.astype(np.float64)) - y * z))
    dz = (p - y) / F32(BATCH)
    dh = np.outer(dz, w2) * (h > 0)
    dx = dh @ w1.T
    flat = np.concatenate([(x.T @ dh).ravel(), dh.sum(0), h.T @ dz,
                           [dz.sum()]]).astype(np.float64)
    return dx.reshape(b * len(FIELDS), DIM).astype(F32), flat, loss


def fixed(v):
    return np.rint(np.asarray(v, np.float64) * FIX).astype(np.int64)


def dense_step(dense, total):
    """SGD with the summed fixed-point gradients (the same on every rank)."""
    g = (total.astype(np.float64) / FIX).astype(F32)
    out, at = [], 0
    for p in dense:
        out.append((p - F32(DENSE_LR) * g[at:at + p.size].reshape(p.shape))
                   .astype(F32))
        at += p.size
    return out


def reference(nranks, steps):
    """The same training in this process: returns (losses, table)."""
    table = np.stack([init_row(k) for k in range(KEYS)])
    acc = np.zeros((KEYS, DIM), F32)            # Adagrad's state
    dense, truth, losses = dense_init(), hidden_model(), []
    per = BATCH // nranks
    for t in range(steps):
        keys, y = batch(t, truth)
        total = np.zeros(sum(p.size for p in dense) + 1, np.int64)
        summed = {}                  # key -> row: ranks in rank order
        for r in range(nranks):
            k = keys[r * per:(r + 1) * per].reshape(-1)
            dx, flat, loss = grads(dense, table[k.astype(np.int64)],
                                   y[r * per:(r + 1) * per])
            total += np.concatenate([fixed(flat), fixed([loss])])
            combined = {}            # the worker: duplicates in order
            for i, key in enumerate(k.tolist()):
                if key in combined:
                    combined[key] = combined[key] + dx[i]
                else:
                    combined[key] = dx[i].copy()
            for key in sorted(combined):
                if key in summed:
                    summed[key] = summed[key] + combined[key]
                else:
                    summed[key] = combined[key]
        for key, g in summed.items():            # Adagrad, f32
            acc[key] = acc[key] + g * g
            table[key] = table[key] - F32(EMB_LR) * g / \
                (np.sqrt(acc[key]) + F32(EMB_EPS))
        losses.append(total[-1] / FIX / BATCH)
        dense = dense_step(dense, total[:-1])
    return losses, table


def distributed(steps):
    import collstack
    c = collstack.Client()
    g = c.join("recsys")
    n, rank = g.size, g.rank
    if BATCH % n:
        sys.exit(f"ps_recsys: {n} ranks do not divide the batch {BATCH}")
    per = BATCH // n
    emb = g.ps_table("emb", dim=DIM, key_max=KEYS, mode="sync",
                     optimizer="adagrad", lr=EMB_LR, eps=EMB_EPS,
                     init="uniform", init_scale=INIT_SCALE, seed=INIT_SEED,
                     max_keys=max(KEYS, per * len(FIELDS)))
    dense, truth, losses = dense_init(), hidden_model(), []
    nflat = sum(p.size for p in dense) + 1
    red = c.buffer(nflat, "i64")
    rv = red.numpy()
    for t in range(steps):
        keys, y = batch(t, truth)
        k = keys[rank * per:(rank + 1) * per].reshape(-1)
        rows = emb.pull(k)                       # at clock t
        dx, flat, loss = grads(dense, rows, y[rank * per:(rank + 1) * per])
        push = emb.ipush(k, dx)                  # version t
        rv[:] = np.concatenate([fixed(flat), fixed([loss])])
        g.allreduce(red).wait()
        losses.append(rv[-1] / FIX / BATCH)
        dense = dense_step(dense, rv[:-1])
        push.wait()
    g.barrier().wait()
    final = emb.pull(np.arange(KEYS)) if rank == 0 else None
    emb.destroy()
    if rank == 0:
        ref_losses, ref = reference(n, steps)
        diff = int(np.sum(final.view(np.uint32) != ref.view(np.uint32)))
        down = losses[-1] < losses[0]
        same_loss = losses == ref_losses
        print(f"ps_recsys {'ok' if down and not diff and same_loss else 'FAIL'}"
              f" ranks={n} steps={steps} loss_first={losses[0]:.6f}"
              f" loss_last={losses[-1]:.6f} loss_down={down}"
              f" table_equal_reference={diff == 0} rows={KEYS}"
              f" differing_values={diff} losses_equal_reference={same_loss}")
        if diff or not down or not same_loss:
            sys.exit(1)
    c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--reference", action="store_true",
                    help="only the single-process run (no sidecar)")
    ap.add_argument("--ranks", type=int, default=4,
                    help="--reference: how many ranks it plays")
    a = ap.parse_args()
    if a.reference:
        losses, table = reference(a.ranks, a.steps)
        print(f"ps_recsys reference ranks={a.ranks} steps={a.steps}"
              f" loss_first={losses[0]:.6f} loss_last={losses[-1]:.6f}"
              f" table_sum={float(np.sum(table.astype(np.float64))):.9f}")
        return
    distributed(a.steps)


if __name__ == "__main__":
    main()
