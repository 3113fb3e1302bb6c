# SPDX-License-Identifier: MIT
"""A mixture-of-experts layer trained with expert parallelism over
collstack all-to-alls, checked against a single-process run.

Model: tokens of H features; a fixed gate (H x E, not trained) picks each
token's top-K experts and weighs them with a softmax over the K logits;
expert e is relu(x A_e) B_e (H -> F -> H); a token's output is the
weighted sum of its experts' outputs; loss: mean squared error to a
fixed teacher's target, tanh(x T). Gradients by hand (numpy, float32),
SGD on the experts.

Expert parallelism: each rank owns EXPERTS_PER_RANK experts (E = that x
the group's size) and draws its own tokens every step. The exchanges are
collstack.moe.MoE's (dispatch, combine, backward). Per step:

1. dispatch: one Group.alltoall of the tokens' rows (with the expert id
   in front) to the ranks that own their experts; every block has room
   for all of a rank's token-expert pairs (T x K rows, unused ones marked
   -1), so no token is ever dropped (capacity factor = the worst case);
2. the experts run forward on the rows they received;
3. combine: one Group.alltoall brings the outputs back to the tokens'
   owners, which weigh and sum them;
4. backward: one Group.alltoall carries d loss / d output of each row to
   the expert that made it; the experts' gradients are computed and
   applied where they live (the inputs are data: no fourth all-to-all for
   their gradient), and the loss is summed with an allreduce (f64).

Rows reach an expert ordered by (source rank, token, slot) - the order a
single process that holds every rank's tokens would use - so the
reference run (rank 0, at the end, from the same seeds) must give the same
loss curve and the same expert weights. Rank 0 prints

    moe: N ranks, S steps, E experts top-K, loss A -> B, single-process
    loss curve max rel diff X, expert weights max abs diff Y, match: True

and every rank exits 1 if they differ (rel 1e-6 on the loss, 1e-6 on the
weights), 0 otherwise.

Launch with run_local.py (a mini sidecar and N ranks on this node):

    /usr/bin/python3 python/examples/run_local.py \\
        build/tests/client/mini_sidecar build/client/libcollstack.so 4 \\
        train_moe.py

or on a cluster of collstackd sidecars (scripts/cluster.sh up 4):

    COLLSTACK_LIB=build/client/libcollstack.so PYTHONPATH=python \\
        build/tools/collstack launch -T 2 -- /usr/bin/python3 \\
        python/examples/train_moe.py

By default dispatch and the weighted combine go through the trainer API's
MoE layer (collstack.moe.MoELayer, collstack/moe.h: the receive counts
travel with the rows), backward through Group.alltoallv with the counts
dispatch delivered. --alltoallv sends only the rows used: an all-to-all of
the row counts (one i64 per pair), then Group.alltoallv for the three
exchanges; --padded sends capacity-padded blocks with Group.alltoall. The
results are the same bits.

Options through MOE_ARGS or the command line: --steps S (default 40),
--tokens T per rank per step (64), --hidden H (16), --ffn F (32),
--topk K (2), --experts-per-rank P (2), --lr (0.05), --seed.

Needs numpy (python3-numpy).
"""

import argparse
import os
import shlex
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import collstack  # noqa: E402
from collstack.moe import MoE  # noqa: E402


def args_of(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--ffn", type=int, default=32)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--experts-per-rank", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--alltoallv", action="store_true",
                   help="send only the rows used: an all-to-all of the "
                   "row counts, then Group.alltoallv for the three "
                   "exchanges (instead of the MoE layer)")
    p.add_argument("--padded", action="store_true",
                   help="capacity-padded blocks with Group.alltoall "
                   "(instead of the MoE layer)")
    return p.parse_args(argv)


class Setup:
    """What every rank and the reference derive from the seed alone."""

    def __init__(self, a, world):
        self.a, self.world = a, world
        self.E = a.experts_per_rank * world
        if not 1 <= a.topk <= self.E:
            raise SystemExit(f"moe: --topk {a.topk} needs 1..{self.E} "
                             "experts")
        rng = np.random.default_rng(a.seed)
        h = a.hidden
        self.gate = rng.standard_normal((h, self.E)).astype(np.float32)
        self.teacher = (rng.standard_normal((h, h)) /
                        np.sqrt(h)).astype(np.float32)

    def expert_init(self, e):
        rng = np.random.default_rng((self.a.seed, 1000 + e))
        h, f = self.a.hidden, self.a.ffn
        return [(rng.standard_normal((h, f)) / np.sqrt(h)).astype(
                    np.float32),
                (rng.standard_normal((f, h)) / np.sqrt(f)).astype(
                    np.float32)]

    def tokens(self, step, rank):
        rng = np.random.default_rng((self.a.seed, step, rank))
        x = rng.standard_normal((self.a.tokens, self.a.hidden)).astype(
            np.float32)
        return x, np.tanh(x @ self.teacher)

    def route(self, x):
        """(experts, weights): T x K each, slot order = logit order."""
        logits = x @ self.gate
        k = self.a.topk
        top = np.argsort(-logits, axis=1, kind="stable")[:, :k]
        sel = np.take_along_axis(logits, top, axis=1)
        w = np.exp(sel - sel.max(axis=1, keepdims=True))
        return top, (w / w.sum(axis=1, keepdims=True)).astype(np.float32)

    def owner(self, e):
        return e // self.a.experts_per_rank


def expert_fwd(p, x):
    hh = np.maximum(x @ p[0], 0)
    return hh @ p[1], hh


def expert_bwd(p, x, hh, dy, lr):
    db = hh.T @ dy
    da = x.T @ ((dy @ p[1].T) * (hh > 0))
    p[0] -= lr * da
    p[1] -= lr * db


def loss_terms(out, y, ntotal, h):
    d = out - y
    return (np.sum(d.astype(np.float64) ** 2),
            (2.0 / (ntotal * h) * d).astype(np.float32))


def reference(st):
    """The single-process run: every rank's tokens in one place."""
    a, n = st.a, st.world
    params = [st.expert_init(e) for e in range(st.E)]
    ntotal, curve = a.tokens * n, []
    for step in range(a.steps):
        data = [st.tokens(step, r) for r in range(n)]
        routes = [st.route(x) for x, _ in data]
        rows = {e: [] for e in range(st.E)}   # (rank, t, k) in order
        for r in range(n):
            top = routes[r][0]
            for t in range(a.tokens):
                for k in range(a.topk):
                    rows[int(top[t, k])].append((r, t, k))
        ys = [np.zeros((a.tokens, a.topk, a.hidden), np.float32)
              for _ in range(n)]
        cache = {}
        for e, lst in rows.items():
            if not lst:
                continue
            x = np.stack([data[r][0][t] for r, t, _ in lst])
            y, hh = expert_fwd(params[e], x)
            cache[e] = (x, hh)
            for i, (r, t, k) in enumerate(lst):
                ys[r][t, k] = y[i]
        total, douts = 0.0, []
        for r in range(n):
            out = np.zeros((a.tokens, a.hidden), np.float32)
            for k in range(a.topk):
                out += routes[r][1][:, k:k + 1] * ys[r][:, k]
            s, dout = loss_terms(out, data[r][1], ntotal, a.hidden)
            total += s
            douts.append(dout)
        curve.append(total / (ntotal * a.hidden))
        for e, lst in rows.items():
            if not lst:
                continue
            dy = np.stack([routes[r][1][t, k] * douts[r][t]
                           for r, t, k in lst]).astype(np.float32)
            expert_bwd(params[e], cache[e][0], cache[e][1], dy, a.lr)
    return curve, params


def node_sum_check(c, g, st, a, node_sum=True, node_rows=False):
    """A layer with node_sum=True: every bit of the combine against the
    node-order sum (the nodes: LOCAL_WORLD_SIZE ranks each); its
    set_weights refused. node_rows=True: the dispatch's rows per node
    (without node_sum: every bit against the slot-order sum)."""
    n, r, h, k, T = g.size, g.rank, a.hidden, a.topk, a.tokens
    L = int(os.environ.get("LOCAL_WORLD_SIZE", n))
    P = a.experts_per_rank
    layer = g.moe_layer(T, h, k, experts_per_rank=P, node_sum=node_sum,
                        node_rows=node_rows)
    rng = np.random.default_rng(1000 + r)
    x = rng.standard_normal((T, h)).astype(np.float32)
    idx = np.stack([rng.permutation(st.E)[:k] for _ in range(T)]
                   ).astype(np.int32)
    idx[::5, -1] = -1                      # "none" now and then
    w = rng.random((T, k)).astype(np.float32)

    def f(e, v):                           # the expert's function
        return v * np.float32(e + 1) - np.float32(0.5 * e)
    layer.dispatch(x, idx, w).wait()
    try:
        if node_sum:
            layer.set_weights(w)
            raise SystemExit(f"rank {r}: set_weights of a node-sum layer "
                             "not refused")
    except collstack.CollstackError:
        pass
    for e, rows, _, _, _, y in layer.experts():
        y[:] = f(e, rows)
    out = layer.combine()
    want = np.zeros((T, h), np.float32)
    for t in range(T):
        acc = np.zeros(h, np.float32)
        for b in range(n // L if node_sum else 1):
            part, any_ = np.zeros(h, np.float32), False
            for j in range(k):
                e = idx[t, j]
                if e >= 0 and (not node_sum or e // P // L == b):
                    part = part + w[t, j] * f(e, x[t])
                    any_ = True
            if any_:
                acc = acc + part
        want[t] = acc
    what = ("node-sum" if node_sum else "") + \
        ("+node-rows" if node_sum and node_rows else
         "node-rows" if node_rows else "")
    ref = "node-order" if node_sum else "slot-order"
    if not np.array_equal(out.view(np.uint32), want.view(np.uint32)):
        raise SystemExit(f"rank {r}: {what} combine differs from the "
                         f"{ref} sum")
    layer.close()
    if r == 0:
        print(f"moe: {what} layer, {n} ranks in {n // L} node(s): every "
              f"bit as the {ref} sum")


def main():
    a = args_of(shlex.split(os.environ.get("MOE_ARGS", "")) + sys.argv[1:])
    c = collstack.Client()
    g = c.join("moe")
    n, r = g.size, g.rank
    st = Setup(a, n)
    h, k, T, P = a.hidden, a.topk, a.tokens, a.experts_per_rank
    cap = T * k                      # rows per block: never a drop
    mine = list(range(r * P, (r + 1) * P))
    params = {e: st.expert_init(e) for e in mine}
    exchange = ("alltoallv" if a.alltoallv else
                "padded" if a.padded else "layer")
    moe = MoE(c, g, hidden=h, max_tokens=T, topk=k, experts_per_rank=P,
              exchange=exchange)
    # bad routing is refused before anything is sent (every rank alike)
    for bad in (np.full((T, k), st.E), np.full((T, k), -2)):
        try:
            moe.dispatch(np.zeros((T, h), np.float32), bad)
            raise SystemExit(f"rank {r}: expert {bad[0, 0]} not refused")
        except ValueError:
            pass
    if exchange == "layer" and n > 1:
        # the layer itself: rank 1's bad index fails every rank's
        # dispatch (CS_ERR_BAD_DESC naming rank 1), nothing sent
        bad = np.full((T, k), -1, np.int32)
        if r == 1:
            bad[0, 0] = st.E
        try:
            moe._layer.dispatch(np.zeros((T, h), np.float32), bad).wait()
            raise SystemExit(f"rank {r}: bad input of rank 1 not refused")
        except collstack.CollstackError as e:
            if e.code != -1004 or "rank 1" not in str(e):
                raise
        node_sum_check(c, g, st, a)
        node_sum_check(c, g, st, a, node_sum=False, node_rows=True)
        node_sum_check(c, g, st, a, node_sum=True, node_rows=True)
    lb = c.buffer(1, "f64")
    ntotal, curve, t_comm = T * n, [], 0.0
    t0 = time.monotonic()
    for step in range(a.steps):
        x, y = st.tokens(step, r)
        top, w = st.route(x)
        tc = time.monotonic()
        rows, local = moe.dispatch(x, top)       # (source, token, slot)
        t_comm += time.monotonic() - tc
        yrows = np.zeros_like(rows)
        cache = {}
        for j, e in enumerate(mine):
            sel = np.flatnonzero(local == j)
            if sel.size:
                ye, hh = expert_fwd(params[e], rows[sel])
                cache[e] = (sel, rows[sel], hh)
                yrows[sel] = ye
        tc = time.monotonic()
        out = moe.combine(yrows, w)              # slot order
        t_comm += time.monotonic() - tc
        s, dout = loss_terms(out, y, ntotal, h)
        tc = time.monotonic()
        dy = moe.backward(w[:, :, None] * dout[:, None, :])
        lb.numpy()[0] = s
        g.allreduce(lb).wait()
        t_comm += time.monotonic() - tc
        for e, (sel, xe, hh) in cache.items():
            expert_bwd(params[e], xe, hh, dy[sel], a.lr)
        curve.append(float(lb.numpy()[0]) / (ntotal * h))
    t_run = time.monotonic() - t0
    # every rank's experts to every rank, in expert order
    per = P * 2 * h * a.ffn
    sb, rb = c.buffer(per), c.buffer(per * n)
    sb.numpy()[:] = np.concatenate([m.reshape(-1) for e in mine
                                    for m in params[e]])
    g.all_gather(sb, rb).wait()
    ok = True
    if r == 0:
        ref_curve, ref_params = reference(st)
        got = rb.numpy().copy()
        want = np.concatenate([m.reshape(-1) for p in ref_params
                               for m in p])
        rel = max(abs(u - v) / max(abs(v), 1e-30)
                  for u, v in zip(curve, ref_curve))
        wdiff = float(np.max(np.abs(got - want)))
        ok = rel <= 1e-6 and wdiff <= 1e-6
        print(f"moe: {n} ranks, {a.steps} steps, {st.E} experts top-{k}, "
              f"loss {curve[0]:.6f} -> {curve[-1]:.6f}, single-process "
              f"loss curve max rel diff {rel:.3g}, expert weights max abs "
              f"diff {wdiff:.3g}, match: {ok}")
        if a.alltoallv:
            print(f"moe: {t_run * 1e3 / a.steps:.2f} ms per step, "
                  f"{t_comm * 1e3 / a.steps:.2f} ms of it in 3 "
                  f"all-to-all-v (the rows used: {T * k * (h + 1) * 4} + "
                  f"2 x {T * k * h * 4} bytes sent per rank), 1 all-to-all "
                  "of the counts and 1 allreduce")
        elif exchange == "layer":
            print(f"moe: {t_run * 1e3 / a.steps:.2f} ms per step, "
                  f"{t_comm * 1e3 / a.steps:.2f} ms of it in the MoE "
                  "layer's dispatch and combine, 1 all-to-all-v "
                  "(backward) and 1 allreduce")
        else:
            print(f"moe: {t_run * 1e3 / a.steps:.2f} ms per step, "
                  f"{t_comm * 1e3 / a.steps:.2f} ms of it in 3 all-to-alls "
                  f"({n * cap * (h + 1) * 4} + 2 x {n * cap * h * 4} bytes "
                  "per rank) and 1 allreduce")
    fl = c.buffer(1, "f64")
    fl.numpy()[0] = 0.0 if ok else 1.0
    g.allreduce(fl).wait()
    bad = fl.numpy()[0] != 0
    c.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
