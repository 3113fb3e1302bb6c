# SPDX-License-Identifier: MIT
"""Mixture-of-experts token exchange for expert parallelism, on a group's
all-to-alls (needs numpy).

Each rank owns ``experts_per_rank`` consecutive experts (rank r: experts
r P .. r P + P - 1). A step:

    moe = MoE(client, group, hidden=H, max_tokens=T, topk=K,
              experts_per_rank=P)
    rows, local = moe.dispatch(x, experts)   # x: T x H, experts: T x K
    y = ... each expert on rows[local == j] ...   # one output row per row
    out = moe.combine(y, weights)            # T x H: sum_k w[t,k] y[t,k]
    # backward: d loss / d each token's K outputs, to the experts
    dy = moe.backward(weights[:, :, None] * dout[:, None, :])

``dispatch`` sends every (token, slot) pair to the rank owning its expert
(an expert id of -1: none) and returns the rows this rank received, in
(source rank, token, slot) order — the order a single process holding
every rank's tokens would use — and each row's local expert index.
``combine`` brings the experts' outputs back and sums them per token in
slot order (the same bits whatever the arrival order); ``backward``
carries per-slot gradients to the rows they belong to, in dispatch's row
order.

By default only the rows used travel: an all-to-all of the row counts (one
i64 per pair), then Group.alltoallv. ``padded=True`` instead sends
capacity-padded blocks of T K rows per destination with Group.alltoall
(no count exchange, more bytes). Values are float32. Bad routing (an
expert id past the last expert, below -1) raises ValueError before
anything is sent.
"""

import numpy as np


class MoE:
    def __init__(self, client, group, hidden, max_tokens, topk,
                 experts_per_rank, padded=False):
        n = group.size
        self.g, self.n, self.h = group, n, hidden
        self.t_max, self.k, self.p = max_tokens, topk, experts_per_rank
        self.padded = padded
        self.experts = experts_per_rank * n
        cap = max_tokens * topk            # a rank's pairs: never more
        self._cap = cap
        self._bx = [client.buffer(n * cap * (hidden + 1)) for _ in range(2)]
        self._by = [client.buffer(n * cap * hidden) for _ in range(2)]
        self._bc = [client.buffer(n, "i64") for _ in range(2)]
        self._state = None

    def _route(self, experts):
        e = np.asarray(experts)
        if e.ndim != 2 or e.shape[1] != self.k or e.shape[0] > self.t_max:
            raise ValueError(f"moe: experts must be T x {self.k} with T <= "
                             f"{self.t_max}, not {e.shape}")
        if e.size and (e.min() < -1 or e.max() >= self.experts):
            raise ValueError(f"moe: an expert id outside -1 .. "
                             f"{self.experts - 1}")
        t = e.shape[0]
        used = e >= 0
        dst = np.where(used, e // self.p, 0)
        fill = np.zeros(self.n, np.int64)
        pos = np.zeros(e.shape, np.int64)
        for i in range(t):               # (token, slot) order per dest
            for j in range(self.k):
                if used[i, j]:
                    pos[i, j] = fill[dst[i, j]]
                    fill[dst[i, j]] += 1
        return e, used, dst, pos, fill

    def dispatch(self, x, experts):
        """Rows received (M x H float32, (source, token, slot) order) and
        their local expert index (M,)."""
        x = np.asarray(x, np.float32)
        e, used, dst, pos, fill = self._route(experts)
        if x.shape != (e.shape[0], self.h):
            raise ValueError(f"moe: x must be {e.shape[0]} x {self.h}")
        h, n, cap = self.h, self.n, self._cap
        sx, rx = (b.numpy() for b in self._bx)
        ti, si = np.nonzero(used)
        if self.padded:
            blk = sx.reshape(n, cap, h + 1)
            blk[:, :, 0] = -1
            blk[dst[ti, si], pos[ti, si], 0] = e[ti, si]
            blk[dst[ti, si], pos[ti, si], 1:] = x[ti]
            self.g.alltoall(sx, rx).wait()
            got = None
            inx = rx.reshape(-1, h + 1)
            keep = inx[:, 0] >= 0
        else:
            row = np.concatenate([[0], np.cumsum(fill)[:-1]])[dst] + pos
            cs, cr = (b.numpy() for b in self._bc)
            cs[:] = fill
            self.g.alltoall(cs, cr).wait()
            got = cr.copy()
            px = sx.reshape(-1, h + 1)[:int(fill.sum())]
            px[row[ti, si], 0] = e[ti, si]
            px[row[ti, si], 1:] = x[ti]
            self.g.alltoallv(px.reshape(-1), rx, fill * (h + 1),
                             got * (h + 1)).wait()
            inx = rx.reshape(-1, h + 1)[:int(got.sum())]
            keep = np.ones(len(inx), bool)
        at = np.flatnonzero(keep)          # rows of inx that are real
        self._state = (e.shape[0], used, dst, pos, fill, got, at, len(inx))
        rows = inx[at, 1:].copy()
        local = (inx[at, 0].astype(np.int64) - self.g.rank * self.p)
        return rows, local

    def _back(self, rows_out):
        """rows_out (M x H, dispatch's rows) to their tokens: T x K x H."""
        t, used, dst, pos, fill, got, at, nin = self._state
        h = self.h
        sy, ry = (b.numpy() for b in self._by)
        out = sy.reshape(-1, h)[:nin]
        out[:] = 0
        out[at] = rows_out
        if self.padded:
            self.g.alltoall(sy, ry).wait()
            back = ry.reshape(self.n, self._cap, h)[dst, pos]
        else:
            self.g.alltoallv(out.reshape(-1), ry, got * h, fill * h).wait()
            row = np.concatenate([[0], np.cumsum(fill)[:-1]])[dst] + pos
            back = ry.reshape(-1, h)[row]
        return np.where(used[:, :, None], back, 0).astype(np.float32)

    def combine(self, y, weights=None):
        """The experts' outputs (one row per dispatched row) back to their
        tokens: T x K x H, or with weights (T x K) the T x H sum over the
        slots in slot order."""
        ys = self._back(np.asarray(y, np.float32))
        if weights is None:
            return ys
        w = np.asarray(weights, np.float32)
        out = np.zeros((ys.shape[0], self.h), np.float32)
        for j in range(self.k):
            out += w[:, j:j + 1] * ys[:, j]
        return out

    def backward(self, dys):
        """Per-slot gradients at the token owner (T x K x H) to the rows
        dispatch delivered: M x H, in the same row order."""
        t, used, dst, pos, fill, got, at, nin = self._state
        h, n = self.h, self.n
        d = np.asarray(dys, np.float32)
        sy, ry = (b.numpy() for b in self._by)
        ti, si = np.nonzero(used)
        if self.padded:
            blk = sy.reshape(n, self._cap, h)
            blk[:] = 0
            blk[dst[ti, si], pos[ti, si]] = d[ti, si]
            self.g.alltoall(sy, ry).wait()
            inn = ry.reshape(-1, h)
        else:
            row = np.concatenate([[0], np.cumsum(fill)[:-1]])[dst] + pos
            pd = sy.reshape(-1, h)[:int(fill.sum())]
            pd[row[ti, si]] = d[ti, si]
            self.g.alltoallv(pd.reshape(-1), ry, fill * h, got * h).wait()
            inn = ry.reshape(-1, h)[:nin]
        return inn[at].copy()
