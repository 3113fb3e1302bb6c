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

By default (``exchange="layer"``) dispatch and the weighted combine go
through the trainer API's MoE layer (MoELayer below, collstack/moe.h):
each token travels once to each rank holding one of its experts, the
receive counts travel with the rows in the same operation, and the sidecar
path sums the outputs in slot order. ``combine`` without weights and
``backward`` then use Group.alltoallv with the counts dispatch delivered
(known at both ends: no count exchange). ``exchange="alltoallv"`` is the
older path: an all-to-all of the row counts (one i64 per pair), then
Group.alltoallv. ``padded=True`` (or ``exchange="padded"``) sends
capacity-padded blocks of T K rows per destination with Group.alltoall (no
count exchange, more bytes). Values are float32. Bad routing (an expert id
past the last expert, below -1) raises ValueError before anything is sent.
"""

import ctypes

import numpy as np


class _LayerCfg(ctypes.Structure):
    _fields_ = [("tokens", ctypes.c_uint32), ("hidden", ctypes.c_uint32),
                ("topk", ctypes.c_uint32), ("experts", ctypes.c_uint32),
                ("expert_rank", ctypes.c_void_p),
                ("experts_per_rank", ctypes.c_uint32),
                ("flags", ctypes.c_uint32)]

NODE_SUM = 1  # CS_MOE_LAYER_NODE_SUM
NODE_ROWS = 2  # CS_MOE_LAYER_NODE_ROWS


def _f32_view(addr, n, h):
    if not n or not addr:
        return np.zeros((0, h), np.float32)
    a = ctypes.cast(addr, ctypes.POINTER(ctypes.c_float))
    return np.ctypeslib.as_array(a, shape=(n, h))


def _u32_view(addr, n):
    if not n or not addr:
        return np.zeros(0, np.uint32)
    a = ctypes.cast(addr, ctypes.POINTER(ctypes.c_uint32))
    return np.ctypeslib.as_array(a, shape=(n,))


class MoELayer:
    """The trainer API's MoE layer (collstack/moe.h) on a group; float32.

        layer = group.moe_layer(tokens=T, hidden=H, topk=K,
                                experts_per_rank=P)
        layer.dispatch(x, idx, w).wait()     # idx: T x K, -1: none
        for e, rows, src, tok, slot, y in layer.experts():
            y[:] = f_e(rows)                 # y: the expert's outputs
        out = layer.combine()                # T x H, slot order

    dispatch sends each token once to each rank holding one of its
    experts; the receive counts travel with the rows (one operation).
    Bad input on any rank (an index >= E or below -1, a repeated expert,
    more than T tokens) fails the dispatch on every rank (CollstackError,
    CS_ERR_BAD_DESC), nothing sent.

    node_sum=True (CS_MOE_LAYER_NODE_SUM, the same on every rank: else
    the first dispatch fails on every rank): combine sends one row per
    (token, node) across nodes, not one per (token, expert); out is then
    the sum in node order of each node's sum in slot order (other last
    bits than the slot order's); the weights go with the dispatch, so
    set_weights() is refused (docs/alltoall.md, "Trainers' MoE").

    node_rows=True (CS_MOE_LAYER_NODE_ROWS, the same on every rank, with
    or without node_sum): dispatch sends a token's row across nodes once
    per destination node, not once per destination rank (forwarded inside
    the node by the sidecar); what each rank gets and the combine's bits
    are unchanged.
    """

    def __init__(self, group, tokens, hidden, topk, experts_per_rank=None,
                 expert_rank=None, node_sum=False, node_rows=False):
        from . import _lib
        if not hasattr(_lib, "cs_moe_layer_create"):
            raise RuntimeError("this libcollstack has no cs_moe_layer_create")
        self._lib, self.g, self._c = _lib, group, group._c
        self.h, self.k, self.t_max = hidden, topk, tokens
        if expert_rank is None:
            self._er = None
            self.experts_n = experts_per_rank * group.size
        else:
            self._er = np.ascontiguousarray(expert_rank, np.uint32)
            self.experts_n = len(self._er)
        cfg = _LayerCfg(tokens, hidden, topk, self.experts_n,
                        None if self._er is None else
                        self._er.ctypes.data, experts_per_rank or 0,
                        (NODE_SUM if node_sum else 0) |
                        (NODE_ROWS if node_rows else 0))
        h = ctypes.c_void_p()
        self._c._check(_lib.cs_moe_layer_create(group._h, ctypes.byref(cfg),
                                                ctypes.byref(h)))
        self._h = h
        self._out = None

    def dispatch(self, x, idx, w=None):
        """Post the dispatch of this rank's tokens; returns the Request."""
        from . import Request
        idx = np.ascontiguousarray(idx, np.int32)
        t = idx.shape[0]
        x = np.ascontiguousarray(x, np.float32)
        w = (np.ones(idx.shape, np.float32) if w is None
             else np.ascontiguousarray(w, np.float32))
        if x.shape != (t, self.h) or idx.shape != (t, self.k) or \
                w.shape != idx.shape:
            raise ValueError(f"moe layer: x must be T x {self.h}, idx and w "
                             f"T x {self.k}")
        req = ctypes.c_uint64()
        self._c._check(self._lib.cs_moe_dispatch(
            self._h, t, x.ctypes.data, idx.ctypes.data, w.ctypes.data,
            ctypes.byref(req)))
        self._t = t
        return Request(self._c, req.value, (x, idx, w))

    def experts(self):
        """After the dispatch: per local expert (expert id order),
        (expert, rows, src_rank, src_token, src_slot, out): rows in
        (source rank, token) order, out the view its outputs go into."""
        res = []
        for i in range(self._lib.cs_moe_local_experts(self._h)):
            e, n = ctypes.c_uint32(), ctypes.c_uint32()
            ptr = [ctypes.c_void_p() for _ in range(4)]
            self._c._check(self._lib.cs_moe_rows(
                self._h, i, ctypes.byref(e), ctypes.byref(n),
                *[ctypes.byref(q) for q in ptr]))
            n = n.value
            y = _f32_view(self._lib.cs_moe_layer_out(self._h, i), n, self.h)
            res.append((e.value, _f32_view(ptr[0].value, n, self.h),
                        _u32_view(ptr[1].value, n),
                        _u32_view(ptr[2].value, n),
                        _u32_view(ptr[3].value, n), y))
        return res

    def set_weights(self, w):
        w = np.ascontiguousarray(w, np.float32)
        self._c._check(self._lib.cs_moe_set_weights(self._h, w.ctypes.data))

    def icombine(self, expert_out=None):
        """Post the combine; returns (Request, out): out (T x H) is
        written once the request succeeded."""
        from . import Request
        out = np.zeros((self._t, self.h), np.float32)
        eo = None
        if expert_out is not None:
            eo = np.ascontiguousarray(expert_out, np.float32)
        req = ctypes.c_uint64()
        self._c._check(self._lib.cs_moe_combine(
            self._h, None if eo is None else eo.ctypes.data,
            out.ctypes.data, ctypes.byref(req)))
        return Request(self._c, req.value, (eo, out)), out

    def combine(self, expert_out=None):
        r, out = self.icombine(expert_out)
        r.wait()
        return out

    def close(self):
        """Free the layer (before the client is closed: after, its
        buffers went with the client)."""
        if self._h and getattr(self._c, "_h", None):
            self._lib.cs_moe_layer_free(self._h)
        self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class MoE:
    def __init__(self, client, group, hidden, max_tokens, topk,
                 experts_per_rank, padded=False, exchange=None):
        n = group.size
        if exchange is None:
            exchange = "padded" if padded else "layer"
        if exchange not in ("layer", "alltoallv", "padded"):
            raise ValueError(f"moe: exchange {exchange!r}")
        self.g, self.n, self.h = group, n, hidden
        self.t_max, self.k, self.p = max_tokens, topk, experts_per_rank
        self.padded = exchange == "padded"
        self.exchange = exchange
        self._layer = None
        if exchange == "layer":
            self._layer = MoELayer(group, max_tokens, hidden, topk,
                                   experts_per_rank=experts_per_rank)
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

    def _dispatch_layer(self, x, e, used, dst, pos, fill):
        lay = self._layer
        lay.dispatch(x, e).wait()
        parts = lay.experts()
        h = self.h
        if parts:
            rows = np.concatenate([p[1] for p in parts]).reshape(-1, h)
            src = np.concatenate([p[2] for p in parts]).astype(np.int64)
            tok = np.concatenate([p[3] for p in parts]).astype(np.int64)
            slot = np.concatenate([p[4] for p in parts]).astype(np.int64)
            ex = np.concatenate([np.full(len(p[1]), p[0], np.int64)
                                 for p in parts])
        else:
            rows = np.zeros((0, h), np.float32)
            src = tok = slot = ex = np.zeros(0, np.int64)
        order = np.lexsort((slot, tok, src))   # (source, token, slot)
        got = np.bincount(src, minlength=self.n).astype(np.int64)
        m = len(order)
        self._order = order
        self._state = (e.shape[0], used, dst, pos, fill, got,
                       np.arange(m), m)
        return rows[order].copy(), ex[order] - self.g.rank * self.p

    def dispatch(self, x, experts):
        """Rows received (M x H float32, (source, token, slot) order) and
        their local expert index (M,)."""
        x = np.asarray(x, np.float32)
        e, used, dst, pos, fill = self._route(experts)
        if x.shape != (e.shape[0], self.h):
            raise ValueError(f"moe: x must be {e.shape[0]} x {self.h}")
        if self._layer is not None:
            return self._dispatch_layer(x, e, used, dst, pos, fill)
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
        if self._layer is not None and weights is not None:
            y = np.asarray(y, np.float32)
            ye = np.empty_like(y)
            ye[self._order] = y            # back to expert order
            self._layer.set_weights(weights)
            return self._layer.combine(ye)
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
