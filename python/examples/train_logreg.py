# SPDX-License-Identifier: MIT
"""Data-parallel logistic regression through collstack, with numpy arrays
over the sidecar's shared buffers.

Each rank holds a shard of one synthetic data set (samples r, r+n, ...).
Every step it writes its shard's gradient sum and loss sum into a shared
buffer (a numpy view, no copy), the sidecar allreduces it, and every rank
applies the same full-batch update. At the end the ranks all-gather their
loss curves and check them bit for bit, and rank 0 reruns the same
training in one process (no collstack) and checks that every step's loss
agrees within 1e-5 relative (only the summation order differs).

Launch with torchrun-style variables and COLLSTACK_SOCKET, or with
run_local.py. Needs numpy (Debian: python3-numpy, /usr/bin/python3).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import collstack  # noqa: E402

DIM, SAMPLES, STEPS, LR, SEED = 16, 4096, 100, 0.5, 7
REL_TOL = 1e-5


def dataset():
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((SAMPLES, DIM))
    w_true = rng.standard_normal(DIM)
    logits = x @ w_true + 0.3
    y = (rng.random(SAMPLES) < 1.0 / (1.0 + np.exp(-logits))).astype(float)
    return x, y


def grad_loss(w, b, x, y):
    """Sums (not means) over the given samples: gradient and log-loss."""
    z = x @ w + b
    p = 1.0 / (1.0 + np.exp(-z))
    loss = np.sum(np.logaddexp(0.0, z) - y * z)
    d = p - y
    return x.T @ d, np.sum(d), loss


def train(shard_fn):
    """shard_fn(gw, gb, loss) -> full-batch sums; returns the loss curve."""
    w, b, curve = np.zeros(DIM), 0.0, []
    for _ in range(STEPS):
        gw, gb, loss = shard_fn(w, b)
        curve.append(loss / SAMPLES)
        w = w - LR * gw / SAMPLES
        b = b - LR * gb / SAMPLES
    return np.array(curve), w


def main():
    x, y = dataset()
    with collstack.Client() as c:
        g = c.join("logreg")
        xs, ys = x[g.rank::g.size], y[g.rank::g.size]
        buf = c.buffer(DIM + 2, "f64")
        view = buf.numpy()

        def distributed(w, b):
            gw, gb, loss = grad_loss(w, b, xs, ys)
            view[:DIM] = gw
            view[DIM] = gb
            view[DIM + 1] = loss
            g.allreduce(buf, op="sum").wait(timeout=120)
            return view[:DIM].copy(), view[DIM], view[DIM + 1]

        curve, w = train(distributed)

        # Bit-identical on every rank: gather every rank's curve.
        mine = c.buffer(STEPS, "f64")
        mine.numpy()[:] = curve
        every = c.buffer(STEPS * g.size, "f64")
        g.all_gather(mine, every).wait(timeout=120)
        curves = every.numpy().reshape(g.size, STEPS)
        identical = all(curves[r].tobytes() == curve.tobytes()
                        for r in range(g.size))
        # one write per line: the ranks share the terminal
        sys.stdout.write(f"rank {g.rank}/{g.size}: loss {curve[0]:.6f} -> "
                         f"{curve[-1]:.6f}, curves bit-identical on all "
                         f"ranks: {identical}\n")
        sys.stdout.flush()
        ok = identical
        if g.rank == 0:
            ref, _ = train(lambda w, b: grad_loss(w, b, x, y))
            rel = np.max(np.abs(curve - ref) / np.abs(ref))
            close = rel <= REL_TOL
            print(f"single process: loss {ref[0]:.6f} -> {ref[-1]:.6f}; "
                  f"max relative difference over {STEPS} steps: "
                  f"{rel:.3e} (limit {REL_TOL:g}): "
                  f"{'ok' if close else 'FAIL'}", flush=True)
            ok = ok and close
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
