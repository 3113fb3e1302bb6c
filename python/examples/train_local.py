# SPDX-License-Identifier: MIT
"""Data-parallel training through the local sidecar (standard library only).

Every rank fits the same linear model y = w.x + b on its own shard of a
synthetic data set; gradients are averaged with an allreduce each step, so
all ranks keep identical weights. Launch with torchrun-style variables
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and COLLSTACK_SOCKET, or
use run_local.py, which starts a mini sidecar and the ranks.
"""

import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import collstack  # noqa: E402

DIM, SAMPLES, STEPS, LR = 8, 256, 200, 0.05


def main():
    true_w = [0.5 * (i + 1) * (-1) ** i for i in range(DIM)]
    true_b = 0.25
    with collstack.Client() as c:
        g = c.join("train")
        rng = random.Random(1000 + g.rank)       # this rank's shard
        data = []
        for _ in range(SAMPLES):
            x = [rng.uniform(-1, 1) for _ in range(DIM)]
            y = sum(a * b for a, b in zip(true_w, x)) + true_b
            data.append((x, y + rng.gauss(0, 0.01)))

        w = [0.0] * DIM
        b = 0.0
        grad = c.buffer(DIM + 2, "f64")          # dw..., db, loss
        for step in range(STEPS):
            gw = [0.0] * DIM
            gb = loss = 0.0
            for x, y in data:
                err = sum(a * b for a, b in zip(w, x)) + b - y
                loss += err * err
                for i in range(DIM):
                    gw[i] += 2 * err * x[i]
                gb += 2 * err
            n = SAMPLES
            grad[:] = [v / n for v in gw] + [gb / n, loss / n]
            g.allreduce(grad, op="sum").wait(timeout=60)
            avg = [v / g.size for v in grad[:]]
            w = [wi - LR * gi for wi, gi in zip(w, avg[:DIM])]
            b -= LR * avg[DIM]
            if g.rank == 0 and (step % 50 == 0 or step == STEPS - 1):
                print(f"step {step:4d}  loss {avg[DIM + 1]:.6f}",
                      flush=True)

        # Every rank must hold the same bits: gather a digest of w.
        digest = c.buffer(g.size, "f64")
        mine = c.buffer(1, "f64")
        mine[0] = struct.unpack("d", struct.pack("d", sum(
            (i + 1) * v for i, v in enumerate(w + [b]))))[0]
        g.all_gather(mine, digest).wait(timeout=60)
        same = len(set(digest[:])) == 1
        err = max(abs(a - t) for a, t in zip(w, true_w))
        print(f"rank {g.rank}/{g.size}: max |w - w_true| = {err:.4f}, "
              f"weights identical on all ranks: {same}", flush=True)
        return 0 if same and err < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
