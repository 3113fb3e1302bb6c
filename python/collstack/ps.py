# SPDX-License-Identifier: MIT
"""Parameter-server tables (collstack/ps.h) for the ctypes binding.

    import collstack
    g = collstack.Client().join("job")
    emb = g.ps_table("emb", dim=16, key_max=1_000_000, optimizer="adagrad",
                     lr=0.05, mode="sync")
    rows = emb.pull(keys)            # numpy (n, dim), at this worker's clock
    emb.push(keys, grads)            # version = this worker's clock, then +1
    emb.checkpoint("/ckpt")          # every shard to /ckpt/emb.shard<S>.ckpt
    emb.destroy()
    emb = g.ps_table("emb", ..., restore="/ckpt")   # loaded; emb.clock set

Every rank of the group creates the table (collectively, with the same
arguments) and is one of its workers. `pull(keys)` asks at the worker's
clock (the versions it pushed): in sync mode it returns once every
worker's pushes of those versions are applied. `ipush` / `ipull` post
without waiting and return a Request (`ipull(...).wait()` returns the
rows). Keys and rows are copied into shared buffers of the table (numpy
in, numpy out); the sidecar copies them once more when it takes the
request.

`checkpoint(dir)` (collective) writes every shard's file and returns once
all are in place (`icheckpoint` posts it); `restore=dir` at creation (or
`restore(dir)` before any push) loads them into the new table and sets
the worker's clock to the checkpoint's; the new table's group may span
other nodes than the checkpointed one's (each shard loads the rows it
owns now from every file: docs/ps.md, "Trainer API").
"""

import ctypes

import numpy as np

from . import _lib, CollstackError, Request, _DTYPES

MODES = {"sync": 0, "async": 1, "ssp": 2}
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adagrad": 2, "adam": 3}
INITS = {"zero": 0, "const": 1, "uniform": 2}
_ROW_NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
              "bf16": np.uint16}


class _Opt(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("lr", ctypes.c_float),
                ("momentum", ctypes.c_float), ("beta1", ctypes.c_float),
                ("beta2", ctypes.c_float), ("eps", ctypes.c_float),
                ("initial_acc", ctypes.c_float)]


class _Init(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("seed", ctypes.c_uint64),
                ("scale", ctypes.c_float)]


class _Attr(ctypes.Structure):
    """struct cs_ps_table_attr of collstack/ps.h."""
    _fields_ = [("dim", ctypes.c_uint32), ("dtype", ctypes.c_int),
                ("key_max", ctypes.c_uint64), ("mode", ctypes.c_int),
                ("staleness", ctypes.c_uint32), ("opt", _Opt),
                ("init", _Init), ("mem_budget", ctypes.c_uint64)]


def _bind():
    if not hasattr(_lib, "cs_ps_table_create"):
        return False            # a libcollstack older than 0.5
    p, i, u64, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, \
        ctypes.c_size_t
    pp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "cs_ps_table_attr_init": (None, [ctypes.POINTER(_Attr),
                                         ctypes.c_uint32, u64, i]),
        "cs_ps_table_create": (i, [p, ctypes.c_char_p,
                                   ctypes.POINTER(_Attr), pp]),
        "cs_ps_table_destroy": (i, [p]),
        "cs_ps_push": (i, [p, u64, p, p, sz, ctypes.POINTER(u64)]),
        "cs_ps_pull": (i, [p, u64, p, sz, p, ctypes.POINTER(u64)]),
    }
    if hasattr(_lib, "cs_ps_checkpoint"):
        sigs.update({
            "cs_ps_checkpoint": (i, [p, ctypes.c_char_p,
                                     ctypes.POINTER(u64)]),
            "cs_ps_table_restore": (i, [p, ctypes.c_char_p,
                                        ctypes.POINTER(u64)]),
            "cs_ps_table_clock": (u64, [p]),
        })
    for fn, (res, args) in sigs.items():
        f = getattr(_lib, fn)
        f.restype = res
        f.argtypes = args
    return True


_HAVE = _bind()


class _Slot:
    """Shared buffers for one request in flight: keys and rows."""

    def __init__(self, client, n, dim, dtype):
        self.keys = client.buffer(max(n, 1), "i64")
        self.rows = client.buffer(max(n, 1) * dim, dtype)
        self.k = self.keys.numpy().view(np.uint64)
        self.r = self.rows.numpy().view(_ROW_NUMPY[dtype])
        self.busy = False


class PullRequest(Request):
    """A posted pull: wait() returns the rows (numpy, n x dim, a copy)."""

    def __init__(self, table, req, slot, n):
        super().__init__(table._c, req, (slot,))
        self._t, self._slot, self._n, self.rows = table, slot, n, None

    def _finish(self, ret):
        slot = self._slot
        try:
            super()._finish(ret)
            self.rows = slot.r[:self._n * self._t.dim].reshape(
                self._n, self._t.dim).copy()
        finally:
            slot.busy = False

    def wait(self, timeout=None):
        super().wait(timeout)
        return self.rows


class _PushRequest(Request):
    def __init__(self, table, req, slot):
        super().__init__(table._c, req, (slot,))
        self._slot = slot

    def _finish(self, ret):
        try:
            super()._finish(ret)
        finally:
            self._slot.busy = False


class _CtlRequest(Request):
    """A posted checkpoint or restore (a restore sets the table's clock
    to the checkpoint's when it finished well)."""

    def __init__(self, table, req, restore):
        super().__init__(table._c, req, ())
        self._t, self._restore = table, restore

    def _finish(self, ret):
        super()._finish(ret)
        if self._restore:
            self._t.clock = int(_lib.cs_ps_table_clock(self._t._h))


class Table:
    """A parameter-server table of `key_max` rows of `dim` values (see the
    module's doc). Created by Group.ps_table()."""

    def __init__(self, group, name, dim, key_max, dtype="f32", mode="sync",
                 optimizer="sgd", lr=0.01, momentum=None, beta1=None,
                 beta2=None, eps=None, initial_acc=None, init="zero",
                 init_scale=0.0, seed=0, max_keys=65536, max_inflight=4,
                 restore=None, mem_budget=0):
        if not _HAVE:
            raise CollstackError(-95, "libcollstack has no PS tables")
        if dtype not in _ROW_NUMPY:
            raise ValueError(f"dtype {dtype}: f32, f64, f16 or bf16")
        self._g, self._c = group, group._c
        self.name, self.dim, self.key_max = name, dim, key_max
        self.dtype, self.max_keys = dtype, max_keys
        self.max_inflight = max_inflight
        self.clock = 0          # versions this worker pushed
        a = _Attr()
        kind = OPTIMIZERS.get(optimizer)
        if kind is None:
            raise ValueError(f"optimizer {optimizer}: one of "
                             f"{', '.join(OPTIMIZERS)}")
        _lib.cs_ps_table_attr_init(ctypes.byref(a), dim, key_max, kind)
        a.dtype = _DTYPES[dtype][0]
        m, _, s = mode.partition(":")
        if m not in MODES or (m == "ssp") != bool(s):
            raise ValueError(f"mode {mode}: sync, async or ssp:S")
        a.mode, a.staleness = MODES[m], int(s or 0)
        a.opt.lr = lr
        for f, v in (("momentum", momentum), ("beta1", beta1),
                     ("beta2", beta2), ("eps", eps),
                     ("initial_acc", initial_acc)):
            if v is not None:
                setattr(a.opt, f, v)
        if init not in INITS:
            raise ValueError(f"init {init}: zero, const or uniform")
        a.init.kind, a.init.scale, a.init.seed = INITS[init], init_scale, \
            seed
        # bytes of rows each shard keeps in memory; the rest go to a
        # spill file in the sidecar's ps.spill_dir (0: all in memory)
        a.mem_budget = int(mem_budget)
        h = ctypes.c_void_p()
        self._c._check(_lib.cs_ps_table_create(group._h, name.encode(),
                                               ctypes.byref(a),
                                               ctypes.byref(h)))
        self._h = h
        self._slots = []
        if restore is not None:
            try:
                self.restore(restore)
            except BaseException:
                self.destroy()
                raise

    def _slot(self, n):
        if n > self.max_keys:
            raise ValueError(f"{n} keys: at most max_keys={self.max_keys}")
        for s in self._slots:
            if not s.busy:
                s.busy = True
                return s
        if len(self._slots) == self.max_inflight:
            raise CollstackError(-11, f"table {self.name}: "
                                 f"{self.max_inflight} requests in "
                                 "flight; wait for one first")
        s = _Slot(self._c, self.max_keys, self.dim, self.dtype)
        s.busy = True
        self._slots.append(s)
        return s

    @staticmethod
    def _keys(keys):
        return np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1)

    def ipush(self, keys, grads, version=None):
        """Post a push of grads (n x dim) for keys (n) as `version`
        (default: this worker's clock, which then moves on); returns a
        Request."""
        k = self._keys(keys)
        g = np.asarray(grads, dtype=_ROW_NUMPY[self.dtype])
        if g.shape != (len(k), self.dim):
            raise ValueError(f"grads of shape {g.shape}: ({len(k)}, "
                             f"{self.dim}) expected (row size mismatch)")
        v = self.clock if version is None else version
        s = self._slot(len(k))
        s.k[:len(k)] = k
        s.r[:g.size] = g.reshape(-1)
        req = ctypes.c_uint64()
        ret = _lib.cs_ps_push(self._h, v, s.keys.addr(), s.rows.addr(),
                              len(k), ctypes.byref(req))
        if ret:
            s.busy = False
            raise CollstackError(ret, self._c.errmsg())
        if version is None:
            self.clock += 1
        return _PushRequest(self, req.value, s)

    def push(self, keys, grads, version=None):
        """Push and wait (see ipush)."""
        self.ipush(keys, grads, version).wait()

    def ipull(self, keys, clock=None):
        """Post a pull of keys at `clock` (default: this worker's);
        returns a PullRequest whose wait() gives the rows."""
        k = self._keys(keys)
        s = self._slot(len(k))
        s.k[:len(k)] = k
        req = ctypes.c_uint64()
        ret = _lib.cs_ps_pull(self._h, self.clock if clock is None
                              else clock, s.keys.addr(), len(k),
                              s.rows.addr(), ctypes.byref(req))
        if ret:
            s.busy = False
            raise CollstackError(ret, self._c.errmsg())
        return PullRequest(self, req.value, s, len(k))

    def pull(self, keys, clock=None):
        """Pull and wait: the rows, numpy (n x dim)."""
        return self.ipull(keys, clock).wait()

    def _ctl(self, fn, path, restore):
        if not hasattr(_lib, "cs_ps_checkpoint"):
            raise CollstackError(-95, "libcollstack has no PS checkpoints")
        req = ctypes.c_uint64()
        ret = fn(self._h, str(path).encode(), ctypes.byref(req))
        if ret:
            raise CollstackError(ret, self._c.errmsg())
        return _CtlRequest(self, req.value, restore)

    def icheckpoint(self, path):
        """Post a checkpoint of every shard into directory `path`
        (collective: every rank, the same path; no other operation on
        the group until it finished); returns a Request."""
        return self._ctl(_lib.cs_ps_checkpoint, path, False)

    def checkpoint(self, path):
        """Checkpoint and wait: every shard's file
        (<path>/<name>.shard<S>.ckpt) is in place on return."""
        self.icheckpoint(path).wait()

    def restore(self, path):
        """Load the table from a checkpoint in `path` (collective; right
        after creation, before any push or pull); this worker's clock
        becomes the checkpoint's."""
        self._ctl(_lib.cs_ps_table_restore, path, True).wait()

    def destroy(self):
        """Close the table (collective: a barrier on the group first)."""
        if self._h:
            ret = _lib.cs_ps_table_destroy(self._h)
            self._h = None
            for s in self._slots:
                s.keys.free()
                s.rows.free()
            self._slots = []
            if ret:
                raise CollstackError(ret, self._c.errmsg())


__all__ = ["Table", "PullRequest", "MODES", "OPTIMIZERS", "INITS"]
