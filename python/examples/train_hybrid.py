# SPDX-License-Identifier: MIT
"""A hybrid job: a dense MLP, a sparse embedding table and a small MoE
layer, each parameter group on its own strategy (collstack.strategy).

Model: a sample is 16 dense features and a category id; the id's row of
an embedding table (--rows x 8) is appended, a mixture-of-experts layer
follows (--experts experts, expert e: relu(x A_e) B_e, 24 -> --ffn -> 24;
a sample goes to expert id % E), then an MLP 24 -> 32 -> 1; loss: mean
squared error to a synthetic target. Gradients by hand (numpy), SGD.

Strategies: from the config file (--config, default: allreduce for all
three). The experts on "local" means expert parallelism: rank r holds
experts r P .. r P + P - 1 (P = E / ranks), every sample's row travels to
its expert's rank and back through the MoE layer's all-to-alls
(collstack.moe: dispatch and combine forward, their mirror backward, 4
per step), and each expert's gradient, summed where the expert lives, is
not exchanged at all; any other strategy keeps every expert on every rank
(data parallelism) and exchanges their gradients. --switch-at S asks, on
rank 1 only, to move the embedding to PS at
step S: a sidecar with a parameter server (collstackd) takes it and the
embedding's rows are summed through a PS table from then on (only the
rows a rank touched are pushed); one without (the mini sidecar of
run_local.py) refuses it on every rank with the reason (printed by rank
0), and rank 1 then asks for "rs-ag" at step S + 1. Every rank switches at
the same step, and the parameters stay bit-identical across ranks
(checked at the end; under expert parallelism after an all-gather of
every rank's experts). --timeline FILE (rank 0) writes each
step's exchanges as Chrome trace events (chrome://tracing, Perfetto), and
rank 0 prints the mean exchange time of the embedding before and after
the switch.

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
from collstack.moe import MoE  # noqa: E402
from collstack.strategy import Job, StrategyError  # noqa: E402

EMB, DENSE, HID, BATCH, LR, SEED = 8, 16, 32, 64, 0.2, 11
WIDTH = DENSE + EMB
GROUPS = {"mlp": ["w1", "b1", "w2", "b2"], "embedding": ["emb"],
          "experts": ["ea", "eb"]}


def params(rng, a):
    return {
        "emb": rng.standard_normal((a.rows, EMB)) * 0.1,
        "ea": rng.standard_normal((a.experts, WIDTH, a.ffn)) *
        (0.5 / np.sqrt(WIDTH)),
        "eb": rng.standard_normal((a.experts, a.ffn, WIDTH)) *
        (1.0 / np.sqrt(a.ffn)),
        "w1": rng.standard_normal((WIDTH, HID)) * 0.2,
        "b1": np.zeros(HID),
        "w2": rng.standard_normal((HID, 1)) * 0.2,
        "b2": np.zeros(1),
    }


def batch(rank, step, rows):
    rng = np.random.default_rng(SEED * 1000003 + step * 101 + rank)
    xd = rng.standard_normal((BATCH, DENSE))
    ids = np.minimum(rng.zipf(1.3, BATCH) - 1, rows - 1)
    t = np.sin(xd[:, :1] * 2) + 0.1 * (ids[:, None] % 7)
    return xd, ids, t


def expert_fwd(a, b, x):
    z = x @ a
    u = np.maximum(z, 0)
    return u @ b, (x, z, u)


def expert_bwd(a, b, cache, dy):
    """(d A, d B, d x) of one expert's rows."""
    x, z, u = cache
    du = (dy @ b.T) * (z > 0)
    return x.T @ du, u.T @ dy, du @ a.T


def mlp(p, m, t, g):
    """The MLP after the MoE layer: its gradients into g, the loss sum,
    and d loss / d m."""
    a = m @ p["w1"] + p["b1"]
    r = np.maximum(a, 0)
    y = r @ p["w2"] + p["b2"]
    d = y - t
    g["w2"], g["b2"] = r.T @ d, d.sum(0)
    da = (d @ p["w2"].T) * (a > 0)
    g["w1"], g["b1"] = m.T @ da, da.sum(0)
    return 0.5 * float(np.sum(d * d)), da @ p["w1"].T


def grads(p, xd, ids, t, nexp):
    """Every expert here (data parallelism): gradients (sums over the
    batch) and the loss sum."""
    h0 = np.concatenate([xd, p["emb"][ids]], axis=1)
    e = ids % nexp
    m = np.zeros_like(h0)
    cache = {}
    for k in np.unique(e):
        sel = e == k
        m[sel], cache[k] = expert_fwd(p["ea"][k], p["eb"][k], h0[sel])
    g = {"ea": np.zeros_like(p["ea"]), "eb": np.zeros_like(p["eb"])}
    loss, dm = mlp(p, m, t, g)
    dh0 = np.zeros_like(h0)
    for k, c in cache.items():
        sel = e == k
        g["ea"][k], g["eb"][k], dh0[sel] = expert_bwd(p["ea"][k],
                                                      p["eb"][k], c, dm[sel])
    g["emb"] = np.zeros_like(p["emb"])
    np.add.at(g["emb"], ids, dh0[:, DENSE:])
    return g, loss


def grads_ep(p, xd, ids, t, moe, mine, t_a2a):
    """Expert parallelism: the rows go to their experts' ranks and back
    (4 all-to-alls through the sidecars, timed into t_a2a[0]); the experts'
    gradients are those of this rank's experts over every rank's rows."""
    h0 = np.concatenate([xd, p["emb"][ids]], axis=1)
    top = (ids % moe.experts)[:, None]
    ts = time.perf_counter()
    rows, local = moe.dispatch(h0.astype(np.float32), top)
    t_a2a[0] += time.perf_counter() - ts
    rows = rows.astype(np.float64)
    yrows = np.zeros_like(rows)
    cache = {}
    for j, k in enumerate(mine):
        sel = np.flatnonzero(local == j)
        if sel.size:
            yrows[sel], cache[k] = expert_fwd(p["ea"][k], p["eb"][k],
                                              rows[sel])
            cache[k] = (sel, cache[k])
    ts = time.perf_counter()
    m = moe.combine(yrows.astype(np.float32),
                    np.ones(top.shape, np.float32)).astype(np.float64)
    t_a2a[0] += time.perf_counter() - ts
    g = {"ea": np.zeros_like(p["ea"]), "eb": np.zeros_like(p["eb"])}
    loss, dm = mlp(p, m, t, g)
    ts = time.perf_counter()
    drows = moe.backward(dm[:, None, :].astype(np.float32))
    t_a2a[0] += time.perf_counter() - ts
    dxrows = np.zeros_like(rows)
    for k, (sel, c) in cache.items():
        g["ea"][k], g["eb"][k], dxrows[sel] = expert_bwd(
            p["ea"][k], p["eb"][k], c, drows[sel].astype(np.float64))
    ts = time.perf_counter()
    dh0 = moe.combine(dxrows.astype(np.float32))[:, 0, :].astype(np.float64)
    t_a2a[0] += time.perf_counter() - ts
    g["emb"] = np.zeros_like(p["emb"])
    np.add.at(g["emb"], ids, dh0[:, DENSE:])
    return g, loss


def args_of(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--config")
    ap.add_argument("--switch-at", type=int, default=-1)
    ap.add_argument("--timeline")
    ap.add_argument("--rows", type=int, default=2000,
                    help="embedding rows (default 2000)")
    ap.add_argument("--experts", type=int, default=8,
                    help="experts (default 8; under expert parallelism a "
                    "multiple of the ranks)")
    ap.add_argument("--ffn", type=int, default=24,
                    help="an expert's inner width (default 24)")
    a = ap.parse_args(argv)
    for k in ("rows", "experts", "ffn"):
        if getattr(a, k) < 1:
            ap.error(f"--{k} must be >= 1")
    return a


def main():
    args = args_of(shlex.split(os.environ.get("HYBRID_ARGS", "")) +
                   sys.argv[1:])
    p = params(np.random.default_rng(SEED), args)
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
        moe, mine = None, range(args.experts)
        if job.current("experts") == "local":
            if args.experts % size:
                raise SystemExit(f"hybrid: expert parallelism needs the "
                                 f"experts ({args.experts}) to be a "
                                 f"multiple of the ranks ({size})")
            per = args.experts // size
            mine = range(rank * per, (rank + 1) * per)
            moe = MoE(c, g, hidden=WIDTH, max_tokens=BATCH, topk=1,
                      experts_per_rank=per)
        events, losses, emb_us = [], [], {"before": [], "after": []}
        step_us = {"before": [], "after": []}
        ps_refused = False
        t0 = time.perf_counter()
        for step in range(args.steps):
            t_step = time.perf_counter()
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
            if moe is not None and job.current("experts") != "local":
                raise SystemExit("hybrid: the experts left 'local' under "
                                 "expert parallelism (not supported)")
            xd, ids, t = batch(rank, step, args.rows)
            if moe is None:
                gr, loss = grads(p, xd, ids, t, args.experts)
            else:
                ta = [0.0]
                ts = time.perf_counter()
                gr, loss = grads_ep(p, xd, ids, t, moe, mine, ta)
                events.append({"name": "experts:alltoall", "ph": "X", "cat": "trainer",
                               "pid": rank, "tid": "experts",
                               "dur": ta[0] * 1e6, "ts": (ts - t0) * 1e6,
                               "args": {"step": step,
                                        "exchanges": 4}})
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
                events.append({"name": f"{name}:{strat}", "ph": "X", "cat": "trainer",
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
            dur = (time.perf_counter() - t_step) * 1e6
            events.append({"name": "step", "ph": "X", "cat": "trainer", "pid": rank,
                           "tid": "step", "dur": dur,
                           "ts": (t_step - t0) * 1e6,
                           "args": {"step": step, "embedding":
                                    job.current("embedding")}})
            step_us["after" if step > args.switch_at + 1
                    else "before"].append(dur)
        step_ms = (time.perf_counter() - t0) * 1e3 / max(1, args.steps)
        if moe is not None:
            # every rank's experts to every rank (an expert's weights
            # live on its owner only), then the same check as without
            per = len(mine) * (WIDTH * args.ffn * 2)
            sb, rb = c.buffer(per, "f64"), c.buffer(per * size, "f64")
            sb.numpy()[:] = np.concatenate(
                [p[k][list(mine)].ravel() for k in ("ea", "eb")])
            g.all_gather(sb, rb).wait()
            allx = rb.numpy().reshape(size, 2, -1)
            for i, k in enumerate(("ea", "eb")):
                p[k] = allx[:, i].reshape(p[k].shape).copy()
            if moe._layer is not None:
                moe._layer.close()
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
        mode = ("expert-parallel (4 all-to-alls per step)" if moe
                else "data-parallel")
        print(f"hybrid: {size} ranks, {args.steps} steps, loss "
              f"{losses[0]:.4f} -> {losses[-1]:.4f}, strategies {final}, "
              f"params identical on every rank: {same}")
        a2a = [e["dur"] for e in events if e["name"] == "experts:alltoall"]
        print(f"experts: {args.experts}, {mode}; embedding {args.rows} x "
              f"{EMB}" + (f"; the 4 all-to-alls: mean {np.mean(a2a) / 1e3:.3f}"
                          " ms per step" if a2a else ""))
        print(f"step time: mean {step_ms:.3f} ms over {args.steps} steps "
              f"(rank 0, exchanges and numpy)")
        print(f"final loss {losses[-1]:.9f}")
        if args.switch_at >= 0 and emb_us["after"]:
            print("embedding exchange: mean %.0f us before the switch, "
                  "%.0f us after" % (np.mean(emb_us["before"]),
                                     np.mean(emb_us["after"])))
            print("step time: mean %.3f ms before the switch, %.3f ms "
                  "after" % (np.mean(step_us["before"]) / 1e3,
                             np.mean(step_us["after"]) / 1e3))
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
