# SPDX-License-Identifier: MIT
"""collstack as a torch.distributed backend.

    import collstack.torch                     # registers "collstack"
    torch.distributed.init_process_group("collstack")

A Python ProcessGroup (torch 1.13 and 2.x let a Python subclass of
ProcessGroup be returned by a registered backend's creator; DDP's C++
reducer calls it through pybind11's trampoline). Every operation is posted
on libcollstack's submission ring and returns at once; one progress thread
per process (not per operation) waits for the sidecar's completions
(cs_wait: a short spin, then the client's eventfd) and completes each
operation's torch Future. Details, costs and limits: docs/torch.md.

Tensors inside collstack shared segments (collstack.torch.empty/zeros/
shared) are handed to the sidecar without a copy; others are copied once
into a pooled shared segment and the result copied back. CUDA tensors go
through the sidecar's GPU path (docs/gpu.md): each one's range of its CUDA
allocation is registered with the sidecar once (cached) and the sidecar
copies it through its own streams; with a sidecar that has no GPU support,
or COLLSTACK_TORCH_CUDA=stage, they are copied once through a shared
segment instead.
"""

import atexit
import bisect
import collections
import ctypes
import datetime
import inspect
import json
import os
import secrets
import socket
import threading
import time
import warnings
import weakref

import torch
import torch.distributed as dist

import collstack as _cs

_lib = _cs._lib
BACKEND = "collstack"
EINPROGRESS = 115
EINVAL = 22
EOPNOTSUPP = 95
ENOTCONN = 107
CS_ERR_TIMEOUT = -1002

_RED_DTYPES = {torch.float32: 0, torch.float64: 1, torch.float16: 2,
               torch.bfloat16: 3, torch.int32: 4, torch.int64: 5,
               torch.uint8: 6}
_U8 = 6
_REDOPS = {"SUM": 0, "PRODUCT": 1, "MIN": 2, "MAX": 3}
_SUPPORTED_REDOPS = "sum, product, min, max, avg (floating point)"


class CollstackTorchError(RuntimeError):
    """An operation the backend cannot do, or one that failed."""


def _err(op, msg):
    return CollstackTorchError(f"collstack: {op}: {msg}")


# ---- the process's client, its shared segments and the progress thread ----

def _u8_at(addr, n):
    """A uint8 tensor over n bytes at addr, and the ctypes array it holds
    (the tensor and all its views keep the array alive)."""
    arr = (ctypes.c_uint8 * n).from_address(addr)
    return torch.frombuffer(arr, dtype=torch.uint8), arr


class _Block:
    """Bytes carved from an arena (a collstack shared segment)."""
    __slots__ = ("start", "cls", "u8")

    def __init__(self, start, cls):
        self.start = start
        self.cls = cls
        self.u8, _ = _u8_at(start, cls)


def _size_class(nbytes):
    cls = 256
    while cls < nbytes:
        cls *= 2
    return cls


class _DevReg:
    """One registration of a CUDA tensor's range with the sidecar."""
    __slots__ = ("key", "handle", "ipc", "base", "refs")

    def __init__(self, key, handle, ipc, base):
        self.key, self.handle, self.ipc, self.base = key, handle, ipc, base
        self.refs = 0


class _DevUse:
    """An operation's use of a _DevReg (released with the op's staging)."""
    __slots__ = ("reg", "regs")

    def __init__(self, regs, reg):
        self.regs, self.reg = regs, reg


class _DevRegs:
    """The registrations of CUDA tensors' ranges with the sidecar
    (cs_buf_register_dev), cached by (address, bytes) so a DDP bucket is
    registered once, at most `cap` of them (COLLSTACK_TORCH_DEV_REGS, 16:
    each is one of the trainer's ipc.max_segments segments, and the
    sidecar keeps a pinned shadow of its size) in least-recently-used
    order; one in use by an operation in flight is never dropped.

    Every lookup reads the allocation's CUDA IPC handle again: a range
    whose memory went back to the driver and came back as another
    allocation at the same address has another handle, and is registered
    again (the old registration freed), never written through a stale
    mapping. describe(ptr) -> _DevMem, register(mem, off, len) ->
    (ret, handle), free(handle) are the CUDA / libcollstack calls (fakes
    in tests/torch/test_cuda_path.py)."""

    def __init__(self, describe, register, free, cap):
        self.describe, self.register, self.free = describe, register, free
        self.cap = max(1, cap)
        self.lock = threading.Lock()
        self.regs = collections.OrderedDict()   # key -> _DevReg, LRU first
        self.registered = 0                     # calls that registered

    def use(self, ptr, nbytes):
        """A _DevUse of the range [ptr, ptr + nbytes); raises
        CollstackError (its code from the sidecar) when refused."""
        m = self.describe(ptr)
        ipc = bytes(m.handle)
        key = (ptr, nbytes)
        with self.lock:
            r = self.regs.get(key)
            if r is not None and (r.ipc != ipc or r.base != m.base):
                del self.regs[key]          # another allocation now
                self._drop(r)
                r = None
            if r is None:
                self._evict(self.cap - 1)
                ret, h = self.register(m, ptr - m.base, nbytes)
                if ret:
                    raise _cs.CollstackError(ret, "")
                r = _DevReg(key, h, ipc, m.base)
                self.regs[key] = r
                self.registered += 1
            self.regs.move_to_end(key)
            r.refs += 1
            return _DevUse(self, r)

    def put(self, u):
        with self.lock:
            u.reg.refs -= 1
            if u.reg.refs == 0 and self.regs.get(u.reg.key) is not u.reg:
                self.free(u.reg.handle)     # replaced while in use

    def _drop(self, r):
        if r.refs == 0:
            self.free(r.handle)

    def _evict(self, keep):
        for key in [k for k, r in self.regs.items() if r.refs == 0]:
            if len(self.regs) <= keep:
                break
            self.free(self.regs.pop(key).handle)

    def clear(self):
        with self.lock:
            for r in self.regs.values():
                self._drop(r)
            self.regs.clear()


def _dev_register(client):
    def register(m, off, nbytes):
        h = ctypes.c_void_p()
        ret = _lib.cs_buf_register_dev(client._h, ctypes.byref(m), off,
                                       nbytes, ctypes.byref(h))
        return ret, h
    return register


class _Runtime:
    """One per process: the client, the arenas (collstack shared
    segments, ipc.max_segments of them at most per trainer, 64 by
    default) with a power-of-two block allocator, the progress thread."""

    def __init__(self):
        mode = os.environ.get("COLLSTACK_TORCH_CUDA", "device")
        if mode not in ("device", "stage"):
            raise CollstackTorchError(
                f"collstack: COLLSTACK_TORCH_CUDA={mode!r}: give device "
                "(the sidecar's GPU path) or stage (copies through host "
                "shared memory)")
        self.cuda_mode = mode
        self.client = _cs.Client(os.environ.get("COLLSTACK_SOCKET") or None)
        self.h = self.client._h
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.pending = collections.deque()
        self.arena_bytes = int(os.environ.get("COLLSTACK_TORCH_ARENA",
                                              32 << 20))
        self.starts = []        # sorted arena starts (zero-copy lookup)
        self.ends = []
        self.bufs = []
        self.cur = None         # [next, end] of the arena being carved
        self.free = {}          # size class -> [free block starts]
        self.stopping = False
        self.dev = _DevRegs(lambda p: _cs._Cuda.describe(p),
                            _dev_register(self.client), _lib.cs_buf_free,
                            int(os.environ.get("COLLSTACK_TORCH_DEV_REGS",
                                               16)))
        self.thread = threading.Thread(target=self._progress,
                                       name="collstack-progress",
                                       daemon=True)
        self.thread.start()

    # memory
    def alloc(self, nbytes):
        """(start, size class) of a block of at least nbytes."""
        cls = _size_class(nbytes)
        with self.lock:
            free = self.free.get(cls)
            if free:
                return free.pop(), cls
            if self.cur is None or self.cur[0] + cls > self.cur[1]:
                n = max(self.arena_bytes, cls)
                try:
                    buf = self.client.buffer(n, "u8")
                except _cs.CollstackError as e:
                    raise CollstackTorchError(
                        f"collstack: no shared memory for {nbytes} bytes: "
                        f"{e}") from None
                i = bisect.bisect(self.starts, buf.ptr)
                self.starts.insert(i, buf.ptr)
                self.ends.insert(i, buf.ptr + n)
                self.bufs.insert(i, buf)
                self.cur = [buf.ptr, buf.ptr + n]
            start = self.cur[0]
            self.cur[0] += cls
            return start, cls

    def release(self, start, cls):
        with self.lock:
            self.free.setdefault(cls, []).append(start)

    def find(self, t):
        """True if contiguous CPU tensor t lies in an arena."""
        if t.device.type != "cpu" or not t.is_contiguous():
            return False
        p = t.data_ptr()
        n = t.numel() * t.element_size()
        with self.lock:
            i = bisect.bisect(self.starts, p) - 1
            return i >= 0 and p + n <= self.ends[i]

    def stage(self, nbytes):
        """A staging block of at least nbytes (back with unstage)."""
        start, cls = self.alloc(nbytes)
        return _Block(start, cls)

    def unstage(self, blocks):
        for b in blocks:
            if isinstance(b, _DevUse):
                b.regs.put(b)
            else:
                self.release(b.start, b.cls)

    def dev_use(self, t, staged):
        """The address of contiguous CUDA tensor t for the sidecar's GPU
        path, or None where t goes through host staging (stage mode, or
        a sidecar without GPU support: then for the rest of the run)."""
        if self.cuda_mode != "device" or not t.is_contiguous():
            return None
        n = _nbytes(t)
        if not n:
            return None
        try:
            u = self.dev.use(t.data_ptr(), n)
        except _cs.CollstackError as e:
            if e.code == -EOPNOTSUPP:
                self.cuda_mode = "stage"
                warnings.warn("collstack: the sidecar has no GPU support "
                              f"({self.client.errmsg()}): CUDA tensors are "
                              "copied through host shared memory")
                return None
            raise CollstackTorchError(
                "collstack: registering a CUDA tensor of "
                f"{n} bytes with the sidecar: {self.client.errmsg()} "
                f"({_lib.cs_strerror(e.code).decode()})") from None
        staged.append(u)
        return t.data_ptr()

    # completions
    def submit(self, op):
        with self.cv:
            self.pending.append(op)
            self.cv.notify()

    def _finish(self, op, ret, msg):
        try:
            if ret == 0:
                res = op.on_done() if op.on_done else None
                op.complete(res, None)
            else:
                op.complete(None, _err(op.name, msg))
        except Exception as e:  # a copy-out that failed
            op.complete(None, e)
        finally:
            self.unstage(op.staged)

    def stop(self):
        """At exit: end the progress thread before the interpreter goes
        (a daemon thread stopped inside torch's C++ would abort)."""
        with self.cv:
            self.stopping = True
            self.cv.notify()
        self.thread.join(5)

    def _progress(self):
        h = self.h
        while True:
            with self.cv:
                while not self.pending and not self.stopping:
                    self.cv.wait()
                if self.stopping:
                    return
                ops = list(self.pending)
            done = []
            first = ops[0]
            ret = _lib.cs_wait(h, first.req, 20_000_000)
            if ret == CS_ERR_TIMEOUT:
                msg = self.client.errmsg()
                ret2 = _lib.cs_test(h, first.req)
                if ret2 == -EINVAL:     # it failed on its own deadline
                    done.append((first, ret, msg))
                elif ret2 != -EINPROGRESS:
                    done.append((first, ret2, self.client.errmsg()))
            elif ret == -ENOTCONN:
                msg = ("the sidecar went away (" + self.client.errmsg() +
                       ")")
                for o in ops:
                    done.append((o, ret, msg))
                ops = []
            else:
                done.append((first, ret, self.client.errmsg() if ret else
                             ""))
            for o in ops[1:]:
                r = _lib.cs_test(h, o.req)
                if r != -EINPROGRESS:
                    done.append((o, r, self.client.errmsg() if r else ""))
            now = time.monotonic()
            for o in ops:
                if o.deadline and now > o.deadline and \
                        all(o is not d[0] for d in done) and not o.expired:
                    # torch's timeout: fail the Work; the request stays
                    # posted (its buffers stay out of the pool) until the
                    # sidecar finishes it.
                    o.expired = True
                    o.complete(None, _err(o.name, "timed out after "
                                          f"{o.timeout_s:.0f} s (the "
                                          "process group's timeout)"))
            if done:
                with self.cv:
                    for d in done:
                        self.pending.remove(d[0])
                for o, r, m in done:
                    self._finish(o, r, m)


_RT = None
_RT_LOCK = threading.Lock()


def _runtime():
    global _RT
    with _RT_LOCK:
        if _RT is None:
            _RT = _Runtime()
            atexit.register(_RT.stop)
        return _RT


# ---- zero-copy helpers ----------------------------------------------------

def shared(t):
    """A copy of tensor t in a collstack shared segment (zero copy later)."""
    out = empty(t.shape, dtype=t.dtype)
    out.copy_(t)
    return out


def empty(*size, dtype=torch.float32):
    """An uninitialised CPU tensor in a collstack shared segment: the
    sidecar reads and writes it in place (no copy)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    n = 1
    for s in size:
        n *= int(s)
    esz = torch.empty((), dtype=dtype).element_size()
    rt = _runtime()
    start, cls = rt.alloc(n * esz)
    u8, arr = _u8_at(start, max(n * esz, 1))
    # the block goes back to the pool once no view of it is left
    weakref.finalize(arr, rt.release, start, cls)
    return u8[:n * esz].view(dtype).view(size)


def zeros(*size, dtype=torch.float32):
    t = empty(*size, dtype=dtype)
    t.zero_()
    return t


def is_shared(t):
    """True if t lies in a collstack shared segment (sent without copy)."""
    return _runtime().find(t)


# ---- Work -----------------------------------------------------------------

_KEEP_DONE = collections.deque(maxlen=4096)


class _Work(dist.Work):
    """A posted operation. wait() raises what the sidecar reported.

    pybind11 forgets the Python half of a Work returned to C++ (DDP) once
    Python holds no reference to it, and C++ would then wait on the base
    class forever: the process group keeps every Work until it completed
    and was waited on (or its future taken), and the last 4096 completed
    ones in any case."""

    def __init__(self, pg, name, result):
        super().__init__()
        self._pg = pg
        # torch 1.13 crashes (SIGSEGV in backward) when DDP meets a Future
        # failed with set_exception() from Python; an exception raised in
        # a then() callback is stored as a C++ error and works. So the raw
        # future always gets a result and the one handed out raises.
        self._raw = torch.futures.Future()
        self._fut = self._raw.then(self._unwrap)
        self._result = result
        self._exc = None
        self._done = threading.Event()
        self._claimed = False
        self.name = name
        pg._live.add(self)

    def _unwrap(self, _):
        if self._exc is not None:
            raise self._exc
        return self._result

    def _complete(self, exc):
        self._exc = exc
        self._done.set()
        self._raw.set_result(None)
        self._release()

    def _release(self):
        if self._done.is_set():
            _KEEP_DONE.append(self)
            if self._claimed:
                self._pg._live.discard(self)

    def wait(self, timeout=None):
        self._claimed = True
        t = None
        if timeout is not None:
            t = timeout.total_seconds() if isinstance(
                timeout, datetime.timedelta) else float(timeout)
            if t <= 0:
                t = None
        if not self._done.wait(t):
            raise _err(self.name, f"wait timed out after {t} s")
        self._release()
        if self._exc is not None:
            raise self._exc
        return True

    def get_future(self):
        self._claimed = True
        self._release()
        return self._fut

    def is_completed(self):
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._exc is None

    def exception(self):
        return self._exc

    def result(self):
        self.wait()
        return self._result

    def synchronize(self):
        pass

    def source_rank(self):
        raise _err(self.name, "source_rank: recv from any source is not "
                   "supported")


class _DoneWork(_Work):
    def __init__(self, pg, name, result):
        super().__init__(pg, name, result)
        self._complete(None)


class _Op:
    __slots__ = ("name", "req", "on_done", "staged", "deadline", "expired",
                 "timeout_s", "work", "chain")

    def __init__(self, name, work, staged, on_done, timeout_s):
        self.name = name
        self.work = work
        self.staged = staged
        self.on_done = on_done
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s if timeout_s else None
        self.expired = False
        self.req = None

    def complete(self, res, exc):
        if self.expired:
            return
        self.expired = True
        if self.work is not None:
            self.work._complete(exc)


# ---- helpers --------------------------------------------------------------

def _nbytes(t):
    return t.numel() * t.element_size()


def _bytes_of(t):
    """t's elements as a flat uint8 tensor (a view when contiguous)."""
    t = t.reshape(-1)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(torch.uint8) if t.numel() else torch.empty(
        0, dtype=torch.uint8)


def _redop(name, op, dtype):
    """(cs_redop, avg) for a torch ReduceOp."""
    for k in ("SUM", "PRODUCT", "MIN", "MAX"):
        if op == getattr(dist.ReduceOp, k):
            return _REDOPS[k], False
    if hasattr(dist.ReduceOp, "AVG") and op == dist.ReduceOp.AVG:
        if not dtype.is_floating_point:
            raise _err(name, f"reduce op AVG needs a floating point "
                       f"tensor, not {dtype}")
        return _REDOPS["SUM"], True
    raise _err(name, f"reduce op {op} is not supported "
               f"({_SUPPORTED_REDOPS})")


def _red_dtype(name, t):
    try:
        return _RED_DTYPES[t.dtype]
    except KeyError:
        raise _err(name, f"dtype {t.dtype} cannot be reduced (float32, "
                   "float64, float16, bfloat16, int32, int64, uint8)") \
            from None


def _check_cpu(name, tensors):
    """CPU and CUDA tensors are taken; any other device is refused."""
    for t in tensors:
        if t.device.type not in ("cpu", "cuda"):
            raise _err(name, f"{t.device} tensors are not supported: the "
                       "backend takes CPU and CUDA tensors")


def _one(name, tensors):
    if len(tensors) != 1:
        raise _err(name, f"takes one tensor per process, got "
                   f"{len(tensors)}")
    _check_cpu(name, tensors)
    return tensors[0]


def _env_int(*names):
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v.split("(")[0].split(",")[0])
            except ValueError:
                raise CollstackTorchError(
                    f"collstack: init: ${n}={v!r} is not a number") from None
    return None


_WORLD = {"nodes": None}


def _node_key():
    sock = os.environ.get("COLLSTACK_SOCKET") or "/run/collstack/" \
        "collstack.sock"
    return f"{socket.gethostname()}|{os.path.realpath(sock)}"


# ---- the process group ------------------------------------------------------

class ProcessGroupCollstack(dist.ProcessGroup):
    """torch.distributed process group over the local collstack sidecar."""

    def __init__(self, store, rank, size, timeout, is_world=None):
        try:
            super().__init__(rank, size)
        except TypeError:       # a torch without ProcessGroup(rank, size)
            super().__init__(store, rank, size)
        if size < 1 or not 0 <= rank < size:
            raise CollstackTorchError(
                f"collstack: init: rank {rank} outside a world of {size}")
        self._rank = rank
        self._size = size
        self._live = set()
        self._timeout_s = timeout.total_seconds() if timeout else 0
        self._rt = _runtime()
        self._post_lock = threading.Lock()
        self._pairs = {}
        if is_world is None:
            is_world = _WORLD["nodes"] is None
        self._rendezvous(store, is_world)

    # init ------------------------------------------------------------------
    def _rendezvous(self, store, is_world):
        rank, size = self._rank, self._size
        if is_world:
            env_size = _env_int("WORLD_SIZE", "SLURM_NTASKS")
            env_rank = _env_int("RANK", "SLURM_PROCID")
            if env_size is not None and env_size != size:
                raise CollstackTorchError(
                    f"collstack: init: world_size {size} disagrees with "
                    f"the launcher's {env_size} (WORLD_SIZE/SLURM_NTASKS)")
            if env_rank is not None and env_rank != rank:
                raise CollstackTorchError(
                    f"collstack: init: rank {rank} disagrees with the "
                    f"launcher's {env_rank} (RANK/SLURM_PROCID)")
        wait_s = float(os.environ.get("COLLSTACK_INIT_TIMEOUT", "120"))
        if store.add(f"cs/claim{rank}", 1) != 1:
            raise CollstackTorchError(
                f"collstack: init: rank {rank} was claimed by another "
                "process of this group (two processes with the same rank)")
        me = {"node": _node_key(), "size": size, "pid": os.getpid(),
              "cs_node": self._rt.client.node_index()}
        store.set(f"cs/who{rank}", json.dumps(me))
        if rank == 0:
            store.set("cs/name", "t" + secrets.token_hex(6))
        keys = [f"cs/who{r}" for r in range(size)] + ["cs/name"]
        try:
            store.wait(keys, datetime.timedelta(seconds=wait_s))
        except Exception as e:
            missing = []
            for r in range(size):
                try:
                    store.wait([f"cs/who{r}"],
                               datetime.timedelta(milliseconds=50))
                except Exception:  # noqa: BLE001
                    missing.append(r)
            raise CollstackTorchError(
                f"collstack: init: rank {rank} of {size}: ranks "
                f"{missing} never joined within {wait_s:.0f} s "
                "(COLLSTACK_INIT_TIMEOUT): is world_size right? "
                f"({e})") from None
        who = [json.loads(store.get(f"cs/who{r}")) for r in range(size)]
        bad = [r for r, w in enumerate(who) if w["size"] != size]
        if bad:
            raise CollstackTorchError(
                f"collstack: init: ranks {bad} were started with world_size "
                f"{who[bad[0]]['size']}, rank {rank} with {size}")
        self._name = store.get("cs/name").decode()
        nodes = [w["node"] for w in who]
        self._nodes = nodes
        order = []
        for n in nodes:
            if not order or order[-1] != n:
                order.append(n)
        if len(order) != len(set(order)):
            raise CollstackTorchError(
                "collstack: init: the ranks of a node must be consecutive "
                "(node order = rank order across the sidecars, "
                f"docs/ipcd.md); got nodes {order}")
        if is_world:
            _WORLD["nodes"] = set(order)
        mine = nodes[rank]
        local = [r for r in range(size) if nodes[r] == mine]
        self._local_rank = local.index(rank)
        self._local_size = len(local)
        # a group over some of the nodes runs over those only (its own
        # ring on the sidecars: cs_group_join_nodes)
        spans = sorted({w["cs_node"] for w in who})
        if not is_world and len(order) > 1 and \
                _WORLD["nodes"] is not None and \
                set(order) != _WORLD["nodes"]:
            self._group = self._rt.client.join_nodes(
                self._name, rank, size, self._local_rank,
                self._local_size, spans)
        else:
            self._group = self._rt.client.join(self._name, rank, size,
                                               self._local_rank,
                                               self._local_size)

    def getBackendName(self):
        return BACKEND

    def name(self):
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    # posting ---------------------------------------------------------------
    def _post(self, name, fn, args, staged=(), on_done=None, result=None,
              group=None):
        """Post fn(group, *args, &req); returns the Work."""
        g = group or self._group
        work = _Work(self, name, result)
        op = _Op(name, work, list(staged), on_done, self._timeout_s)
        req = ctypes.c_uint64()
        with self._post_lock:
            ret = fn(g._h, *args, ctypes.byref(req))
        if ret:
            self._rt.unstage(op.staged)
            raise _err(name, self._rt.client.errmsg() +
                       f" ({_lib.cs_strerror(ret).decode()})")
        op.req = req.value
        self._rt.submit(op)
        return work

    def _cuda(self, t, staged):
        """t's address for the sidecar's GPU path (docs/gpu.md), once the
        kernels queued on its stream are done, or None: staged."""
        if t.device.type != "cuda":
            return None
        torch.cuda.current_stream(t.device).synchronize()
        return self._rt.dev_use(t, staged)

    def _in(self, t, staged):
        """(address, segment) of t's bytes for the sidecar to read."""
        if self._rt.find(t):
            return t.data_ptr(), None
        addr = self._cuda(t, staged)
        if addr is not None:
            return addr, None
        n = _nbytes(t)
        s = self._rt.stage(n)
        staged.append(s)
        if n:
            s.u8[:n].copy_(_bytes_of(t))
        return s.start, s

    def _out(self, t, staged):
        """(address, copy-out or None) for the sidecar to write t."""
        if self._rt.find(t):
            return t.data_ptr(), None
        addr = self._cuda(t, staged)
        if addr is not None:
            return addr, None
        n = _nbytes(t)
        s = self._rt.stage(n)
        staged.append(s)

        def back():
            if n:
                t.copy_(s.u8[:n].view(t.dtype).view(t.shape))
        return s.start, back

    def _inout(self, t, staged):
        if self._rt.find(t):
            return t.data_ptr(), None
        addr, s = self._in(t, staged)
        if s is None:           # the GPU path: read and written in place
            return addr, None
        n = _nbytes(t)

        def back():
            if n:
                t.copy_(s.u8[:n].view(t.dtype).view(t.shape))
        return addr, back

    # collectives -------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        name = "allreduce"
        t = _one(name, tensors)
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        return self._allreduce(name, t, op, tensors)

    def _allreduce(self, name, t, op, result):
        red, avg = _redop(name, op, t.dtype)
        dt = _red_dtype(name, t)
        staged = []
        addr, back = self._inout(t, staged)
        size = self._size

        def done():
            if back:
                back()
            if avg:
                t.div_(size)
            return result
        return self._post(name, _lib.cs_allreduce,
                          (addr, addr, t.numel(), dt, red), staged, done,
                          result)

    def allreduce_coalesced(self, tensors, opts=None):
        name = "allreduce_coalesced"
        _check_cpu(name, tensors)
        if not tensors:
            return _DoneWork(self, name, tensors)
        dts = {t.dtype for t in tensors}
        if len(dts) != 1:
            raise _err(name, f"tensors of one dtype only, got {dts}")
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        red, avg = _redop(name, op, tensors[0].dtype)
        dt = _red_dtype(name, tensors[0])
        total = sum(_nbytes(t) for t in tensors)
        s = self._rt.stage(total)
        off = 0
        for t in tensors:
            n = _nbytes(t)
            s.u8[off:off + n].copy_(_bytes_of(t))
            off += n
        size = self._size

        def done():
            o = 0
            for t in tensors:
                n = _nbytes(t)
                t.copy_(s.u8[o:o + n].view(t.dtype).view(t.shape))
                if avg:
                    t.div_(size)
                o += n
            return tensors
        count = total // tensors[0].element_size()
        return self._post(name, _lib.cs_allreduce,
                          (s.start, s.start, count, dt, red), [s], done,
                          tensors)

    def broadcast(self, tensors, opts=None):
        name = "broadcast"
        t = _one(name, tensors)
        root = opts.rootRank if opts is not None else 0
        self._check_root(name, root)
        staged = []
        addr, back = self._inout(t, staged)
        done = None
        if back and self._rank != root:
            def done():
                back()
                return tensors
        return self._post(name, _lib.cs_broadcast,
                          (addr, _nbytes(t), _U8, root), staged, done,
                          tensors)

    def reduce(self, tensors, opts=None):
        # cs_reduce: a reduce-scatter and the blocks sent to the root (an
        # allreduce the root keeps on one node and for small tensors; see
        # collstack.h).
        # The other ranks' tensors are only read.
        name = "reduce"
        t = _one(name, tensors)
        root = opts.rootRank if opts is not None else 0
        self._check_root(name, root)
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        red, avg = _redop(name, op, t.dtype)
        dt = _red_dtype(name, t)
        staged = []
        if self._rank == root:
            addr, back = self._inout(t, staged)
            to = addr
        else:
            addr, _ = self._in(t, staged)
            back, to = None, None
        size, me = self._size, self._rank

        def done():
            if me == root:
                if back:
                    back()
                if avg:
                    t.div_(size)
            return tensors
        return self._post(name, _lib.cs_reduce,
                          (addr, to, t.numel(), dt, red, root), staged, done,
                          tensors)

    def _allgather_bytes(self, name, src, nbytes, staged, outs_done,
                         result, dst=None):
        """allgather of nbytes per rank (uint8); src is an address, dst a
        segment of size*nbytes (staged if None)."""
        if dst is None:
            dst = self._rt.stage(nbytes * self._size)
            staged.append(dst)
        return self._post(name, _lib.cs_all_gather,
                          (src, dst.start, nbytes, _U8), staged,
                          lambda: outs_done(dst), result)

    def allgather(self, output_tensors, input_tensors, opts=None):
        name = "allgather"
        t = _one(name, input_tensors)
        if len(output_tensors) != 1 or \
                len(output_tensors[0]) != self._size:
            raise _err(name, f"takes one list of {self._size} output "
                       "tensors")
        outs = output_tensors[0]
        _check_cpu(name, outs)
        n = _nbytes(t)
        for o in outs:
            if _nbytes(o) != n:
                raise _err(name, "output tensors must match the input's "
                           f"size ({n} bytes), got {_nbytes(o)} (uneven "
                           "all-gather is not supported)")
        staged = []
        src, _ = self._in(t, staged)

        def done(dst):
            for r, o in enumerate(outs):
                if n:
                    o.copy_(dst.u8[r * n:(r + 1) * n].view(o.dtype)
                            .view(o.shape))
            return output_tensors
        return self._allgather_bytes(name, src, n, staged, done,
                                     output_tensors)

    def _allgather_base(self, output, input, opts=None):
        name = "_allgather_base"
        _check_cpu(name, [output, input])
        n = _nbytes(input)
        if _nbytes(output) != n * self._size:
            raise _err(name, f"output has {_nbytes(output)} bytes, needs "
                       f"world size x input = {n * self._size}")
        staged = []
        src, _ = self._in(input, staged)
        dst, back = self._out(output, staged)
        return self._post(name, _lib.cs_all_gather, (src, dst, n, _U8),
                          staged, (lambda: (back(), [output])[1]) if back
                          else None, [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i) for o, i in zip(outputs, inputs)]
        return self._chain("allgather_into_tensor_coalesced", works, outputs)

    def _chain(self, name, works, result):
        if not works:
            return _DoneWork(self, name, result)
        w = _Work(self, name, result)
        last = works[-1]

        def fin(_):
            exc = next((x._exc for x in works if x._exc is not None), None)
            w._complete(exc)
        for x in works:
            x._claimed = True
        last._fut.then(fin)
        return w

    def gather(self, output_tensors, input_tensors, opts=None):
        # cs_gather where the library has it (the root receives the
        # blocks); else an all-gather: exact; every rank receives world
        # size x input (gather's root alone would receive that much).
        name = "gather"
        t = _one(name, input_tensors)
        root = opts.rootRank if opts is not None else 0
        self._check_root(name, root)
        n = _nbytes(t)
        if self._rank == root:
            if len(output_tensors) != 1 or \
                    len(output_tensors[0]) != self._size:
                raise _err(name, f"the root takes one list of {self._size} "
                           "output tensors")
            outs = output_tensors[0]
            _check_cpu(name, outs)
            for o in outs:
                if _nbytes(o) != n:
                    raise _err(name, "output tensors must match the "
                               f"input's size ({n} bytes)")
        elif output_tensors and any(len(x) for x in output_tensors):
            raise _err(name, "only the root gets output tensors")
        else:
            outs = []
        staged = []
        src, _ = self._in(t, staged)
        if hasattr(_lib, "cs_gather"):
            # point to point to the root (cs_gather): only the root
            # receives, world size - 1 blocks
            dst = None
            if self._rank == root:
                dst = self._rt.stage(n * self._size)
                staged.append(dst)

            def done_p2p():
                for r, o in enumerate(outs):
                    if n:
                        o.copy_(dst.u8[r * n:(r + 1) * n].view(o.dtype)
                                .view(o.shape))
                return output_tensors
            return self._post(name, _lib.cs_gather,
                              (src, dst.start if dst else None, n, _U8,
                               root), staged, done_p2p, output_tensors)

        def done(dst):
            for r, o in enumerate(outs):
                if n:
                    o.copy_(dst.u8[r * n:(r + 1) * n].view(o.dtype)
                            .view(o.shape))
            return output_tensors
        return self._allgather_bytes(name, src, n, staged, done,
                                     output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        # cs_scatter where the library has it (each rank receives its
        # block); else a broadcast of the root's whole list: exact; every
        # rank receives world size x output.
        name = "scatter"
        t = _one(name, output_tensors)
        root = opts.rootRank if opts is not None else 0
        self._check_root(name, root)
        n = _nbytes(t)
        p2p = hasattr(_lib, "cs_scatter")
        s = self._rt.stage(n * self._size if self._rank == root or not p2p
                           else 1)
        if self._rank == root:
            if len(input_tensors) != 1 or len(input_tensors[0]) != \
                    self._size:
                raise _err(name, f"the root takes one list of {self._size} "
                           "input tensors")
            _check_cpu(name, input_tensors[0])
            for r, x in enumerate(input_tensors[0]):
                if _nbytes(x) != n:
                    raise _err(name, "input tensors must match the "
                               f"output's size ({n} bytes)")
                if n:
                    s.u8[r * n:(r + 1) * n].copy_(_bytes_of(x))
        elif input_tensors and any(len(x) for x in input_tensors):
            raise _err(name, "only the root gives input tensors")
        me = self._rank
        if p2p:
            # point to point from the root (cs_scatter): each rank
            # receives its block only
            staged = [s]
            addr, back = self._out(t, staged)

            def done_p2p():
                if back:
                    back()
                return output_tensors
            return self._post(name, _lib.cs_scatter,
                              (s.start if me == root else None, addr, n,
                               _U8, root), staged, done_p2p, output_tensors)

        def done():
            if n:
                t.copy_(s.u8[me * n:(me + 1) * n].view(t.dtype)
                        .view(t.shape))
            return output_tensors
        return self._post(name, _lib.cs_broadcast,
                          (s.start, n * self._size, _U8, root), [s], done,
                          output_tensors)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        name = "reduce_scatter"
        t = _one(name, output_tensors)
        if len(input_tensors) != 1 or len(input_tensors[0]) != self._size:
            raise _err(name, f"takes one list of {self._size} input tensors")
        ins = input_tensors[0]
        _check_cpu(name, ins)
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        red, avg = _redop(name, op, t.dtype)
        dt = _red_dtype(name, t)
        n = _nbytes(t)
        for x in ins:
            if _nbytes(x) != n or x.dtype != t.dtype:
                raise _err(name, "input tensors must match the output "
                           f"({t.dtype}, {n} bytes; uneven reduce-scatter "
                           "is not supported)")
        s = self._rt.stage(n * self._size)
        for r, x in enumerate(ins):
            if n:
                s.u8[r * n:(r + 1) * n].copy_(_bytes_of(x))
        staged = [s]
        dst, back = self._out(t, staged)
        size = self._size

        def done():
            if back:
                back()
            if avg:
                t.div_(size)
            return output_tensors
        return self._post(name, _lib.cs_reduce_scatter,
                          (s.start, dst, t.numel(), dt, red), staged, done,
                          output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        name = "_reduce_scatter_base"
        _check_cpu(name, [output, input])
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        red, avg = _redop(name, op, output.dtype)
        dt = _red_dtype(name, output)
        if input.dtype != output.dtype or \
                input.numel() != output.numel() * self._size:
            raise _err(name, "input must hold world size x output elements "
                       "of the output's dtype")
        staged = []
        src, _ = self._in(input, staged)
        dst, back = self._out(output, staged)
        size = self._size

        def done():
            if back:
                back()
            if avg:
                output.div_(size)
            return [output]
        return self._post(name, _lib.cs_reduce_scatter,
                          (src, dst, output.numel(), dt, red), staged, done,
                          [output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._reduce_scatter_base(o, i, opts)
                 for o, i in zip(outputs, inputs)]
        return self._chain("reduce_scatter_tensor_coalesced", works, outputs)

    def _alltoallv_bytes(self, name, src_u8, in_splits, out_splits, dst_u8,
                         result):
        """All-to-all of byte blocks. in_splits/out_splits: bytes per
        peer. Where the sidecars carry all-to-all (the same number of
        ranks on every node), one cs_alltoallv with the blocks as they are
        (the sidecars check that the splits add up across the ranks; no
        padding, no exchange of the split vectors first). Elsewhere (or
        with a libcollstack without cs_alltoallv) the split vectors are
        exchanged first with a blocking all-gather; then, where the
        sidecars carry all-to-all, one cs_alltoall with every block padded
        to the exchange's longest block; else an all-gather of every
        rank's whole input padded to the longest one (every rank receives
        world size x the longest input)."""
        size, me = self._size, self._rank
        if len(in_splits) != size or len(out_splits) != size:
            raise _err(name, f"split sizes need {size} entries")
        if self._a2a_native() and hasattr(_lib, "cs_alltoallv"):
            return self._alltoallv_native(name, src_u8, in_splits,
                                          out_splits, dst_u8, result)
        # everyone's input splits (an int64 all-gather, waited for here so
        # that the data all-gather is posted in call order on every rank)
        mine = torch.tensor(in_splits, dtype=torch.int64)
        allsp = torch.empty(size * size, dtype=torch.int64)
        self._allgather_base(allsp, mine).wait()
        allsp = allsp.view(size, size).tolist()
        for j in range(size):
            if allsp[j][me] != out_splits[j]:
                raise _err(name, f"rank {j} sends {allsp[j][me]} bytes to "
                           f"rank {me}, which expects {out_splits[j]}")
        if self._a2a_native():
            return self._alltoall_padded(name, src_u8, in_splits,
                                         out_splits, dst_u8, allsp, result)
        width = max(sum(row) for row in allsp)
        s = self._rt.stage(max(width, 1))
        total = sum(in_splits)
        if total:
            s.u8[:total].copy_(src_u8[:total])
        staged = [s]
        d = self._rt.stage(max(width, 1) * size)
        staged.append(d)

        def done():
            o = 0
            for j in range(size):
                off = j * width + sum(allsp[j][:me])
                n = out_splits[j]
                if n:
                    dst_u8[o:o + n].copy_(d.u8[off:off + n])
                o += n
            return result
        return self._post(name, _lib.cs_all_gather,
                          (s.start, d.start, max(width, 1), _U8), staged,
                          done, result)

    def _a2a_native(self):
        """Whether the sidecars' all-to-all (cs_alltoall) can carry this
        group: the same number of ranks on every node (the rendezvous
        already made each node's ranks consecutive)."""
        if not hasattr(_lib, "cs_alltoall"):
            return False
        per = {}
        for n in self._nodes:
            per[n] = per.get(n, 0) + 1
        return len(set(per.values())) == 1

    def _alltoallv_native(self, name, src_u8, in_splits, out_splits, dst_u8,
                          result):
        """All-to-all of byte blocks through cs_alltoallv: the input
        staged as it is, the output packed in rank order."""
        size = self._size
        tin, tout = sum(in_splits), sum(out_splits)
        s = self._rt.stage(max(tin, 1))
        d = self._rt.stage(max(tout, 1))
        if tin:
            s.u8[:tin].copy_(src_u8[:tin])

        def displs(v):
            out, o = [], 0
            for x in v:
                out.append(o)
                o += x
            return out

        def done():
            if tout:
                dst_u8[:tout].copy_(d.u8[:tout])
            return result
        arr = ctypes.c_size_t * size
        return self._post(name, _lib.cs_alltoallv,
                          (s.start, arr(*in_splits), arr(*displs(in_splits)),
                           d.start, arr(*out_splits),
                           arr(*displs(out_splits)), _U8), [s, d], done,
                          result)

    def _alltoall_padded(self, name, src_u8, in_splits, out_splits, dst_u8,
                         allsp, result):
        """All-to-all of byte blocks through cs_alltoall, every block
        padded to the longest block of the exchange (allsp: every rank's
        input splits, the same on every rank, so every rank picks the
        same width)."""
        size, me = self._size, self._rank
        blk = max(max(row) for row in allsp) or 1
        s = self._rt.stage(blk * size)
        d = self._rt.stage(blk * size)
        o = 0
        for j in range(size):
            n = in_splits[j]
            if n:
                s.u8[j * blk:j * blk + n].copy_(src_u8[o:o + n])
            o += n

        def done():
            o = 0
            for j in range(size):
                n = out_splits[j]
                if n:
                    dst_u8[o:o + n].copy_(d.u8[j * blk:j * blk + n])
                o += n
            return result
        return self._post(name, _lib.cs_alltoall,
                          (s.start, d.start, blk, _U8), [s, d], done,
                          result)

    def alltoall_base(self, output, input, output_split_sizes,
                      input_split_sizes, opts=None):
        name = "alltoall_base"
        _check_cpu(name, [output, input])
        size = self._size
        if input.dtype != output.dtype:
            raise _err(name, "input and output must have one dtype")
        row_in = _nbytes(input[0]) if input.dim() and len(input) else 0
        row_out = _nbytes(output[0]) if output.dim() and len(output) else 0
        row = row_in or row_out
        if not input_split_sizes:
            if input.dim() == 0 or len(input) % size:
                raise _err(name, f"input's first dimension must divide by "
                           f"world size {size} without split sizes")
            input_split_sizes = [len(input) // size] * size
        if not output_split_sizes:
            if output.dim() == 0 or len(output) % size:
                raise _err(name, f"output's first dimension must divide by "
                           f"world size {size} without split sizes")
            output_split_sizes = [len(output) // size] * size
        if sum(input_split_sizes) != (len(input) if input.dim() else 0) or \
                sum(output_split_sizes) != (len(output) if output.dim()
                                            else 0):
            raise _err(name, "split sizes must add up to the first "
                       "dimension")
        if not output.is_contiguous():
            raise _err(name, "the output tensor must be contiguous")
        return self._alltoallv_bytes(
            name, _bytes_of(input.contiguous()),
            [x * row for x in input_split_sizes],
            [x * row for x in output_split_sizes], _bytes_of(output),
            [output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        name = "alltoall"
        size = self._size
        if len(output_tensors) != size or len(input_tensors) != size:
            raise _err(name, f"takes {size} input and {size} output tensors")
        _check_cpu(name, output_tensors + input_tensors)
        src = torch.cat([_bytes_of(x.contiguous()) for x in input_tensors]) \
            if input_tensors else torch.empty(0, dtype=torch.uint8)
        outs = [_nbytes(o) for o in output_tensors]
        dst = torch.empty(sum(outs), dtype=torch.uint8)
        w = self._alltoallv_bytes(name, src,
                                  [_nbytes(x) for x in input_tensors], outs,
                                  dst, output_tensors)

        def spread(_):
            o = 0
            for t, n in zip(output_tensors, outs):
                if n:
                    t.copy_(dst[o:o + n].view(t.dtype).view(t.shape))
                o += n
        # the copies run before the Work completes: wrap in a chained Work
        w2 = _Work(self, name, output_tensors)
        w._claimed = True

        def fin(f):
            try:
                f.wait()
                spread(f)
                w2._complete(None)
            except Exception as e:
                w2._complete(e)
        w._fut.then(fin)
        return w2

    def barrier(self, opts=None):
        return self._post("barrier", _lib.cs_barrier, ())

    # point to point --------------------------------------------------------
    def _pair(self, name, src, dst):
        """The 2-rank group carrying messages src -> dst (same node): the
        path of a libcollstack without cs_send/cs_recv."""
        key = (src, dst)
        g = self._pairs.get(key)
        if g is not None:
            return g
        if self._nodes[src] != self._nodes[dst]:
            raise _err(name, f"rank {src} -> rank {dst} crosses nodes: "
                       "this libcollstack has no cs_send/cs_recv")
        g = self._rt.client.join(f"{self._name}.{src}>{dst}",
                                 0 if self._rank == src else 1, 2,
                                 0 if self._rank == src else 1, 2)
        self._pairs[key] = g
        return g

    def _p2p(self, name, tensors, peer, tag, sending):
        t = _one(name, tensors)
        if not 0 <= peer < self._size or peer == self._rank:
            raise _err(name, f"bad peer rank {peer}")
        if not 0 <= tag < 0xffff0000:
            raise _err(name, f"tag {tag} is not in 0 .. 0xfffeffff (tags "
                       "from 0xffff0000 are the library's)")
        staged = []
        done = None
        if hasattr(_lib, "cs_send"):
            # cs_send/cs_recv: between any two ranks, on one node or
            # across nodes, tags matched (sidecar/svc_p2p.c)
            if sending:
                addr, _ = self._in(t, staged)
                fn = _lib.cs_send
            else:
                addr, back = self._out(t, staged)
                fn = _lib.cs_recv
                if back:
                    def done():
                        back()
                        return tensors
            return self._post(name, fn, (addr, _nbytes(t), _U8, peer, tag),
                              staged, done, tensors)
        if tag:
            raise _err(name, f"tag {tag}: this libcollstack has no "
                       "cs_send/cs_recv (messages between two ranks are "
                       "matched in order)")
        src, dst = (self._rank, peer) if sending else (peer, self._rank)
        g = self._pair(name, src, dst)
        addr, back = self._inout(t, staged)
        if back and not sending:
            def done():
                back()
                return tensors
        return self._post(name, _lib.cs_broadcast,
                          (addr, _nbytes(t), _U8, 0), staged, done,
                          tensors, group=g)

    def send(self, tensors, dstRank, tag=0):
        return self._p2p("send", tensors, dstRank, tag, True)

    def recv(self, tensors, srcRank, tag=0):
        return self._p2p("recv", tensors, srcRank, tag, False)

    def recv_anysource(self, tensors, tag=0):
        raise _err("recv_anysource", "receiving from any source is not "
                   "supported")

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        raise _err("monitored_barrier", "not supported (use barrier)")

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        raise _err("allgather_coalesced", "not supported")

    def _check_root(self, name, root):
        if not 0 <= root < self._size:
            raise _err(name, f"root rank {root} outside the group's "
                       f"{self._size} ranks")

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def _create(store, rank, size, timeout):
    return ProcessGroupCollstack(store, rank, size, timeout)


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}) or \
            hasattr(dist.Backend, BACKEND.upper()):
        return
    kw = {}
    try:
        if "devices" in inspect.signature(
                dist.Backend.register_backend).parameters:
            kw["devices"] = ["cpu"]        # torch >= 2.0
    except (TypeError, ValueError):
        pass
    dist.Backend.register_backend(BACKEND, _create, **kw)


_register()
