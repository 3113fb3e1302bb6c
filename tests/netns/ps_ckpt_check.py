# SPDX-License-Identifier: MIT
"""Checkpoint and restore of a PS table through the Python binding, on
every rank of a launched job (argv[1]: an existing directory seen by
every node; argv[2], optional: the tables' mem_budget, bytes of rows
each shard keeps in memory, the rest on the SSD tier).

A sync table (SGD, lr 0.5, constant 1, dyadic gradients: exact in f32):
3 versions pushed, every row pulled (the rows at checkpoint time),
table.checkpoint(dir/py), 2 more versions; a new table created with
restore=dir/py has clock 3 and every row equal to those rows, bit for
bit; a checkpoint to a missing directory raises CollstackError naming
it, and a restore of another dim is refused.

Prints "ps_ckpt_py ok rank=R clock=3 rows=300" or "ps_ckpt_py FAIL ...".
"""

import os
import sys

import numpy as np

import collstack

ROWS, DIM = 300, 4
BUDGET = int(sys.argv[2]) if len(sys.argv) > 2 else 0


def grads(rank, v, keys):
    return ((1 + (rank + 3 * v + keys[:, None] + np.arange(DIM)) % 8)
            / 64.0).astype(np.float32)


def table(g, dim=DIM, **kw):
    return g.ps_table("pyck", dim=dim, key_max=ROWS, optimizer="sgd",
                      lr=0.5, mode="sync", init="const", init_scale=1.0,
                      mem_budget=BUDGET, **kw)


def main():
    top = sys.argv[1]
    rank = int(os.environ.get("RANK", "0"))
    c = collstack.Client()
    g = c.join("pyck")
    where = os.path.join(top, "py")
    if rank == 0:
        os.makedirs(where, exist_ok=True)
    all_keys = np.arange(ROWS, dtype=np.uint64)
    mine = (np.arange(50, dtype=np.uint64) * 7 + rank * 11) % ROWS
    t = table(g)
    for v in range(3):
        t.push(mine, grads(rank, v, mine))
    snap = t.pull(all_keys)
    t.checkpoint(where)
    missing = os.path.join(top, "nowhere")
    try:
        t.checkpoint(missing)
        print(f"ps_ckpt_py FAIL rank={rank}: a checkpoint to {missing} "
              "succeeded")
        return 1
    except collstack.CollstackError as e:
        if missing not in str(e) or "No such file" not in str(e):
            print(f"ps_ckpt_py FAIL rank={rank}: {e}")
            return 1
        print(f"  missing directory: {e}")
    for v in range(3, 5):
        t.push(mine, grads(rank, v, mine))
    later = t.pull(all_keys)
    t.destroy()
    t = table(g, restore=where)
    if t.clock != 3:
        print(f"ps_ckpt_py FAIL rank={rank}: clock {t.clock}, want 3")
        return 1
    got = t.pull(all_keys)
    if not np.array_equal(got.view(np.uint32), snap.view(np.uint32)):
        print(f"ps_ckpt_py FAIL rank={rank}: restored rows differ in "
              f"{int((got != snap).any(axis=1).sum())} rows")
        return 1
    for v in range(3, 5):
        t.push(mine, grads(rank, v, mine))
    if not np.array_equal(t.pull(all_keys), later):
        print(f"ps_ckpt_py FAIL rank={rank}: versions 3, 4 after the "
              "restore differ from the first run's")
        return 1
    t.destroy()
    try:
        table(g, dim=DIM + 1, restore=where)
        print(f"ps_ckpt_py FAIL rank={rank}: another dim restored")
        return 1
    except collstack.CollstackError as e:
        print(f"  another dim: {e}")
    print(f"ps_ckpt_py ok rank={rank} clock=3 rows={ROWS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
