# SPDX-License-Identifier: MIT
"""A hybrid job: a dense MLP, a sparse embedding table and a small MoE
layer, each parameter group on its own strategy (collstack.strategy).

Model: a sample is 16 dense features and a category id; the id's row of
an embedding table (ROWS x 8) is appended, a mixture-of-experts layer
(EXPERTS linear 24x24 experts, the expert chosen by id % EXPERTS, ReLU)
follows, then an MLP 24 -> 32 -> 1; loss: mean squared error to a
synthetic target. Gradients by hand (numpy), SGD.

Strategies: from the config file (--config, default: allreduce for all
three). --switch-at S asks, on rank 1 only, to move the embedding to PS at
step S: a sidecar with a parameter server (collstackd) takes it and the
embedding's rows are summed through a PS table from then on (only the
rows a rank touched are pushed); one without (the mini sidecar of
run_local.py) refuses it on every rank with the reason (printed by rank
0), and rank 1 then asks for "rs-ag" at step S + 1. Every rank switches at
the same step, and the parameters stay bit-identical across ranks
(checked at the end). --timeline FILE (rank 0) writes each step's
exchanges as Chrome trace events (chrome://tracing, Perfetto), and rank 0
prints the mean exchange time of the embedding before and after the
switch.

Launch with run_local.py (a mini sidecar and N ranks on this node):

    /usr/bin/python3 python/examples/run_local.py build/tests/client/mini_sidecar \\
        build/client/libcollstack.so 4 train_hybrid.py

(options through HYBRID_ARGS, e.g. HYBRID_ARGS="--switch-at 50
--timeline /tmp/hybrid.json"), or on a cluster of collstackd sidecars,
where the switch to PS is taken (scripts/cluster.sh up 4):

    COLLSTACK_LIB=build/client/libcollstack.so PYTHONPATH=python \\
        build/tools/collstack launch -T 2 -- /usr/bin/python3 \\
        python/examples/train_hybrid.py --switch-at 50

Needs numpy (python3-numpy).
"""

import argparse
import hashlib
import json
import os
import shlex
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import collstack  # noqa: E402
from collstack.strategy import Job, StrategyError  # noqa: E402

ROWS, EMB, DENSE, HID, EXPERTS, BATCH, LR, SEED = 2000, 8, 16, 32, 2, 64, \
    0.2, 11
WIDTH = DENSE + EMB


def params(rng):
    return {
        "emb": rng.standard_normal((ROWS, EMB)) * 0.1,
        "experts": rng.standard_normal((EXPERTS, WIDTH, WIDTH)) * 0.2,
        "w1": rng.standard_normal((WIDTH, HID)) * 0.2,
        "b1": np.zeros(HID),
        "w2": rng.standard_normal((HID, 1)) * 0.2,
        "b2": np.zeros(1),
    }


GROUPS = {"mlp": ["w1", "b1", "w2", "b2"], "embedding": ["emb"],
          "experts": ["experts"]}


def batch(rank, step):
    rng = np.random.default_rng(SEED * 1000003 + step * 101 + rank)
    xd = rng.standard_normal((BATCH, DENSE))
    ids = np.minimum(rng.zipf(1.3, BATCH) - 1, ROWS - 1)
    t = np.sin(xd[:, :1] * 2) + 0.1 * (ids[:, None] % 7)
    return xd, ids, t


def grads(p, xd, ids, t):
    """Gradients (sums over the batch) and the loss sum."""
    h0 = np.concatenate([xd, p["emb"][ids]], axis=1)
    e = ids % EXPERTS
    z = np.einsum("bi,bij->bj", h0, p["experts"][e])
    m = np.maximum(z, 0)
    a = m @ p["w1"] + p["b1"]
    r = np.maximum(a, 0)
    y = r @ p["w2"] + p["b2"]
    d = y - t
    g = {"w2": r.T @ d, "b2": d.sum(0)}
    dr = d @ p["w2"].T
    da = dr * (a > 0)
    g["w1"], g["b1"] = m.T @ da, da.sum(0)
    dz = (da @ p["w1"].T) * (z > 0)
    g["experts"] = np.zeros_like(p["experts"])
    dh0 = np.zeros_like(h0)
    for k in range(EXPERTS):
        sel = e == k
        g["experts"][k] = h0[sel].T @ dz[sel]
        dh0[sel] = dz[sel] @ p["experts"][k].T
    g["emb"] = np.zeros_like(p["emb"])
    np.add.at(g["emb"], ids, dh0[:, DENSE:])
    return g, 0.5 * float(np.sum(d * d))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--config")
    ap.add_argument("--switch-at", type=int, default=-1)
    ap.add_argument("--timeline")
    args = ap.parse_args(shlex.split(os.environ.get("HYBRID_ARGS", "")) +
                         sys.argv[1:])
    p = params(np.random.default_rng(SEED))
    with collstack.Client() as c:
        g = c.join("hybrid")
        rank, size = g.rank, g.size
        layout, off = {}, 0
        for name, keys in GROUPS.items():
            n = sum(p[k].size for k in keys)
            layout[name] = (off, n)
            off += n
        buf = c.buffer(off + 1, "f32")      # + the loss
        view = buf.numpy()
        job = Job(c, g)
        if args.config:
            job.close()
            job = Job(c, g, config=args.config)
        else:
            for name in GROUPS:
                job.add(name, "allreduce")
        events, losses, emb_us = [], [], {"before": [], "after": []}
        ps_refused = False
        t0 = time.perf_counter()
        for step in range(args.steps):
            if rank == 1 and args.switch_at >= 0:
                if step == args.switch_at:
                    job.request("embedding", "ps")
                elif step == args.switch_at + 1 and ps_refused:
                    job.request("embedding", "rs-ag")
            try:
                job.step(step)
            except StrategyError as e:
                ps_refused = step == args.switch_at
                if rank == 0:
                    print(f"step {step}: switch refused: {e}")
            xd, ids, t = batch(rank, step)
            gr, loss = grads(p, xd, ids, t)
            for name, keys in GROUPS.items():
                o, n = layout[name]
                view[o:o + n] = np.concatenate([gr[k].ravel() for k in keys])
            view[off] = loss
            for name in GROUPS:
                o, n = layout[name]
                ts = time.perf_counter()
                strat = job.current(name)
                job.exchange(name, buf, n, o)
                dur = (time.perf_counter() - ts) * 1e6
                events.append({"name": f"{name}:{strat}", "ph": "X",
                               "pid": rank, "tid": name, "dur": dur,
                               "ts": (ts - t0) * 1e6,
                               "args": {"step": step}})
                if name == "embedding" and args.switch_at >= 0:
                    emb_us["after" if step > args.switch_at + 1
                           else "before"].append(dur)
            job.exchange("mlp", buf, 1, off)     # the loss, same strategy
            losses.append(float(view[off]) / (BATCH * size))
            for name, keys in GROUPS.items():
                o, n = layout[name]
                flat = view[o:o + n].astype(np.float64) / (BATCH * size)
                for k in keys:
                    p[k] = p[k] - LR * flat[:p[k].size].reshape(p[k].shape)
                    flat = flat[p[k].size:]
        step_ms = (time.perf_counter() - t0) * 1e3 / max(1, args.steps)
        # parameters bit-identical on every rank: min and max of a hash
        h = c.buffer(2, "i64")
        digest = int.from_bytes(hashlib.sha256(b"".join(
            p[k].astype(np.float64).tobytes() for k in sorted(p))).digest()[:7],
            "little")
        h[0], h[1] = digest, -digest
        g.allreduce(h, op="max").wait()
        same = h[0] == -h[1]
        final = {n: job.current(n) for n in GROUPS}
        job.close()
    if rank == 0:
        print(f"hybrid: {size} ranks, {args.steps} steps, loss "
              f"{losses[0]:.4f} -> {losses[-1]:.4f}, strategies {final}, "
              f"params identical on every rank: {same}")
        print(f"step time: mean {step_ms:.3f} ms over {args.steps} steps "
              f"(rank 0, exchanges and numpy)")
        if args.switch_at >= 0 and emb_us["after"]:
            print("embedding exchange: mean %.0f us before the switch, "
                  "%.0f us after" % (np.mean(emb_us["before"]),
                                     np.mean(emb_us["after"])))
        if args.timeline:
            with open(args.timeline, "w") as f:
                json.dump({"traceEvents": events}, f)
            print(f"timeline: {args.timeline}")
    k = max(1, len(losses) // 5)
    first, last = np.mean(losses[:k]), np.mean(losses[-k:])
    if rank == 0:
        print(f"mean loss of the first {k} steps {first:.4f}, "
              f"of the last {k} {last:.4f}")
    ok = same and last < first
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
