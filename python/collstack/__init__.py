# SPDX-License-Identifier: MIT
"""collstack: a ctypes binding of libcollstack (the trainer API).

`import collstack.torch` adds a torch.distributed backend (docs/torch.md).

Standard library only. Buffers are ctypes arrays over the shared memory,
so they support indexing, slicing and the buffer protocol (memoryview,
numpy.frombuffer / torch.frombuffer where available) without copies.

    import collstack
    c = collstack.Client()                 # COLLSTACK_SOCKET or the default
    g = c.join("dp")                       # RANK/WORLD_SIZE/... or Slurm
    x = c.buffer(1024, "f32")
    x[:] = [1.0] * 1024
    g.allreduce(x).wait()

The library is found through $COLLSTACK_LIB, then the dynamic linker.
"""

import ctypes
import ctypes.util
import os

_DTYPES = {"f32": (0, ctypes.c_float), "f64": (1, ctypes.c_double),
           "f16": (2, ctypes.c_uint16), "bf16": (3, ctypes.c_uint16),
           "i32": (4, ctypes.c_int32), "i64": (5, ctypes.c_int64),
           "u8": (6, ctypes.c_uint8)}
_REDOPS = {"sum": 0, "prod": 1, "min": 2, "max": 3}
EINPROGRESS = 115


def _load():
    name = (os.environ.get("COLLSTACK_LIB") or
            ctypes.util.find_library("collstack") or "libcollstack.so")
    lib = ctypes.CDLL(name)
    p, i, u64, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, \
        ctypes.c_size_t
    pp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "cs_connect": (i, [ctypes.c_char_p, pp]),
        "cs_disconnect": (None, [p]),
        "cs_errmsg": (ctypes.c_char_p, [p]),
        "cs_lost_node": (i, [p]),
        "cs_strerror": (ctypes.c_char_p, [i]),
        "cs_buf_alloc": (i, [p, sz, pp]),
        "cs_buf_ptr": (p, [p]),
        "cs_buf_len": (sz, [p]),
        "cs_buf_free": (i, [p]),
        "cs_group_join": (i, [p, ctypes.c_char_p, i, i, i, i, pp]),
        "cs_group_join_env": (i, [p, ctypes.c_char_p, pp]),
        "cs_group_join_ex": (i, [p, ctypes.c_char_p, i, i, i, i,
                                 ctypes.c_uint, pp]),
        "cs_group_split": (i, [p, i, i, pp]),
        "cs_group_join_nodes": (i, [p, ctypes.c_char_p, i, i, i, i,
                                    ctypes.POINTER(i), i, pp]),
        "cs_node_index": (i, [p]),
        "cs_group_rank": (i, [p]),
        "cs_group_size": (i, [p]),
        "cs_group_leave": (i, [p]),
        "cs_allreduce": (i, [p, p, p, sz, i, i, ctypes.POINTER(u64)]),
        "cs_reduce_scatter": (i, [p, p, p, sz, i, i,
                                  ctypes.POINTER(u64)]),
        "cs_all_gather": (i, [p, p, p, sz, i, ctypes.POINTER(u64)]),
        "cs_broadcast": (i, [p, p, sz, i, i, ctypes.POINTER(u64)]),
        "cs_alltoall": (i, [p, p, p, sz, i, ctypes.POINTER(u64)]),
        "cs_alltoallv": (i, [p, p, ctypes.POINTER(sz), ctypes.POINTER(sz),
                             p, ctypes.POINTER(sz), ctypes.POINTER(sz), i,
                             ctypes.POINTER(u64)]),
        "cs_send": (i, [p, p, sz, i, i, ctypes.c_uint, ctypes.POINTER(u64)]),
        "cs_recv": (i, [p, p, sz, i, i, ctypes.c_uint, ctypes.POINTER(u64)]),
        "cs_reduce": (i, [p, p, p, sz, i, i, i, ctypes.POINTER(u64)]),
        "cs_gather": (i, [p, p, p, sz, i, i, ctypes.POINTER(u64)]),
        "cs_scatter": (i, [p, p, p, sz, i, i, ctypes.POINTER(u64)]),
        "cs_barrier": (i, [p, ctypes.POINTER(u64)]),
        "cs_test": (i, [p, u64]),
        "cs_wait": (i, [p, u64, ctypes.c_int64]),
        "cs_buf_register_dev": (i, [p, p, sz, sz, pp]),
        "cs_event_fd": (i, [p]),
        "cs_event_arm": (i, [p]),
        "cs_moe_layer_create": (i, [p, p, pp]),
        "cs_moe_dispatch": (i, [p, ctypes.c_uint32, p, p, p,
                                ctypes.POINTER(u64)]),
        "cs_moe_local_experts": (ctypes.c_uint32, [p]),
        "cs_moe_rows": (i, [p, ctypes.c_uint32] + [p] * 6),
        "cs_moe_layer_out": (p, [p, ctypes.c_uint32]),
        "cs_moe_combine": (i, [p, p, p, ctypes.POINTER(u64)]),
        "cs_moe_set_weights": (i, [p, p]),
        "cs_moe_layer_free": (None, [p]),
    }
    for fn, (res, args) in sigs.items():
        if (fn in ("cs_buf_register_dev", "cs_alltoallv", "cs_send",
                   "cs_recv", "cs_reduce", "cs_gather", "cs_scatter") or
                fn.startswith("cs_moe_")) and not hasattr(lib, fn):
            continue            # an older libcollstack
        f = getattr(lib, fn)
        f.restype = res
        f.argtypes = args
    return lib


_lib = _load()


class CollstackError(RuntimeError):
    """A failed call: .code is the negative error code."""

    def __init__(self, code, msg):
        super().__init__(f"{msg} ({_lib.cs_strerror(code).decode()}, "
                         f"{code})")
        self.code = code


class Request:
    """A posted operation: test() or wait() until it is finished."""

    def __init__(self, client, req, keep):
        self._c = client
        self._req = req
        self._keep = keep       # buffers stay alive while it runs
        self.done = False

    def _finish(self, ret):
        self.done = True
        self._keep = None
        if ret:
            raise CollstackError(ret, self._c.errmsg())

    def test(self):
        """True once finished (raises CollstackError if it failed)."""
        if self.done:
            return True
        ret = _lib.cs_test(self._c._h, self._req)
        if ret == -EINPROGRESS:
            return False
        self._finish(ret)
        return True

    def wait(self, timeout=None):
        """Block until finished; timeout in seconds (None: forever)."""
        if self.done:
            return
        ns = -1 if timeout is None else int(timeout * 1e9)
        self._finish(_lib.cs_wait(self._c._h, self._req, ns))


_NUMPY = {"f32": "<f4", "f64": "<f8", "i32": "<i4", "i64": "<i8",
          "u8": "u1", "f16": "<f2", "bf16": "<u2"}


class Buffer:
    """Shared memory of `count` elements; `.array` is the ctypes view."""

    def __init__(self, client, count, dtype):
        code, ctype = _DTYPES[dtype]
        h = ctypes.c_void_p()
        client._check(_lib.cs_buf_alloc(client._h,
                                        count * ctypes.sizeof(ctype),
                                        ctypes.byref(h)))
        self._h = h
        self.dtype = dtype
        self.code = code
        self.count = count
        self.ptr = _lib.cs_buf_ptr(h)
        self.array = (ctype * count).from_address(self.ptr)

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        return self.array[i]

    def __setitem__(self, i, v):
        self.array[i] = v

    def memoryview(self):
        return memoryview(self.array)

    def addr(self, index=0):
        return self.ptr + index * ctypes.sizeof(self.array._type_)

    def free(self):
        """Unregister and unmap the buffer (CollstackError -EBUSY while an
        operation naming it is pending)."""
        if self._h:
            ret = _lib.cs_buf_free(self._h)
            if ret:
                raise CollstackError(ret, "free buffer")
            self._h = None
            self.array = None

    def numpy(self):
        """A numpy array over the shared memory itself (no copy): what the
        trainer writes there is what the sidecar reduces, and the result
        appears in it. Needs numpy (Debian: python3-numpy)."""
        import numpy as np
        return np.frombuffer(self.array, dtype=_NUMPY[self.dtype],
                             count=self.count)


# ---- device memory (docs/gpu.md) --------------------------------------------

class _DevMem(ctypes.Structure):
    """struct cs_dev_mem of collstack/collstack.h."""
    _fields_ = [("kind", ctypes.c_int), ("fd", ctypes.c_int),
                ("handle", ctypes.c_ubyte * 64),
                ("uuid", ctypes.c_ubyte * 16),
                ("base", ctypes.c_void_p), ("alloc_len", ctypes.c_size_t)]


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_CAI_TYPES = {"<f4": "f32", "<f8": "f64", "<f2": "f16", "<i4": "i32",
              "<i8": "i64", "|u1": "u8", "<u1": "u8"}
# DLPack (code, bits) -> collstack type; code 0 int, 1 uint, 2 float, 4 bf
_DL_TYPES = {(2, 32): "f32", (2, 64): "f64", (2, 16): "f16",
             (4, 16): "bf16", (0, 32): "i32", (0, 64): "i64", (1, 8): "u8"}
_KDLCUDA = 2


class _Cuda:
    """The few CUDA driver calls the binding needs (libcuda.so.1)."""
    _lib = None

    @classmethod
    def lib(cls):
        if cls._lib is None:
            cu = ctypes.CDLL("libcuda.so.1")
            cu.cuInit(0)
            cls._lib = cu
        return cls._lib

    @classmethod
    def call(cls, name, *args):
        ret = getattr(cls.lib(), name)(*args)
        if ret:
            raise CollstackError(-5, f"{name} failed (CUresult {ret})")

    @classmethod
    def describe(cls, ptr):
        """_DevMem of the allocation holding device address ptr."""
        ordinal = ctypes.c_int()
        ctx = ctypes.c_void_p()
        cls.lib().cuCtxGetCurrent(ctypes.byref(ctx))
        if not ctx.value:        # no context on this thread yet
            dev = ctypes.c_int()
            cls.call("cuDeviceGet", ctypes.byref(dev), 0)
            cls.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
            cls.call("cuCtxSetCurrent", ctx)
        cls.call("cuPointerGetAttribute", ctypes.byref(ordinal), 9,
                 ctypes.c_uint64(ptr))   # ..._DEVICE_ORDINAL
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        cls.call("cuMemGetAddressRange_v2", ctypes.byref(base),
                 ctypes.byref(size), ctypes.c_uint64(ptr))
        m = _DevMem(kind=1, fd=-1, base=base.value, alloc_len=size.value)
        cls.call("cuIpcGetMemHandle", m.handle, ctypes.c_uint64(base.value))
        dev = ctypes.c_int()
        cls.call("cuDeviceGet", ctypes.byref(dev), ordinal.value)
        cls.call("cuDeviceGetUuid_v2", m.uuid, dev)
        return m

    @classmethod
    def sync(cls):
        cls.call("cuCtxSynchronize")


def _device_array(obj):
    """(pointer, element count, collstack dtype) of a contiguous GPU array
    given by __cuda_array_interface__ or DLPack, or None for anything else
    (host memory included)."""
    cai = None
    try:
        cai = obj.__cuda_array_interface__
    except Exception:   # noqa: BLE001 - torch refuses bf16 here
        pass            # (TypeError or KeyError by version): DLPack below
    if cai is not None:
        dtype = _CAI_TYPES.get(cai["typestr"])
        if dtype is None:
            raise ValueError(f"unsupported type {cai['typestr']}")
        n = 1
        for d in cai["shape"]:
            n *= d
        if cai.get("strides") not in (None, ()):
            esz = int(cai["typestr"][2:])
            want = esz
            for d, st in reversed(list(zip(cai["shape"], cai["strides"]))):
                if d > 1 and st != want:
                    raise ValueError("not a contiguous array")
                want *= d
        return cai["data"][0], n, dtype
    if not hasattr(obj, "__dlpack__"):
        return None
    dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") \
        else None
    if dev is not None and dev[0] != _KDLCUDA:
        return None
    cap = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    t = _DLTensor.from_address(get(cap, b"dltensor"))   # DLManagedTensor
    if t.device.device_type != _KDLCUDA:                # starts with it
        return None
    dtype = _DL_TYPES.get((t.dtype.code, t.dtype.bits))
    if dtype is None or t.dtype.lanes != 1:
        raise ValueError("unsupported DLPack type")
    n, want = 1, 1
    shape = [t.shape[i] for i in range(t.ndim)]
    for i in reversed(range(t.ndim)):
        if t.strides and shape[i] > 1 and t.strides[i] != want:
            raise ValueError("not a contiguous array")
        want *= shape[i]
    for d in shape:
        n *= d
    return t.data + t.byte_offset, n, dtype


class DeviceBuffer:
    """A GPU array shared with the sidecar, without a copy by the trainer.

    `obj` is anything with __cuda_array_interface__ (CuPy, Numba, PyTorch)
    or DLPack (__dlpack__: PyTorch bf16 too). Its allocation is exported
    as a CUDA IPC handle; the sidecar maps each allocation once and caches
    the mapping. Collectives on it synchronise the device first (the
    kernels writing it must be done). Keep this object (or use
    Client.device_buffer, which caches it) for the next steps."""

    def __init__(self, client, obj):
        arr = _device_array(obj)
        if arr is None:
            raise TypeError("not a CUDA array (__cuda_array_interface__ "
                            "or DLPack on a CUDA device)")
        ptr, n, dtype = arr
        code, ctype = _DTYPES[dtype]
        m = _Cuda.describe(ptr)
        h = ctypes.c_void_p()
        nbytes = n * ctypes.sizeof(ctype)
        client._check(_lib.cs_buf_register_dev(
            client._h, ctypes.byref(m), ptr - m.base, nbytes,
            ctypes.byref(h)))
        self._h = h
        self._obj = obj             # keeps the memory alive
        self.dtype, self.code, self.count = dtype, code, n
        self.ptr = ptr
        self.device = True

    def addr(self, index=0):
        return self.ptr + index * ctypes.sizeof(_DTYPES[self.dtype][1])

    def __len__(self):
        return self.count

    def free(self):
        if self._h:
            _lib.cs_buf_free(self._h)
            self._h = None


_NUMPY_CODES = {v: _DTYPES[k][0] for k, v in _NUMPY.items()
                if k != "bf16"}     # "<u2" is f16's cousin: bf16 by Buffer


def _shared(b):
    """(address, elements, type code) of a Buffer or of a numpy array
    (C-contiguous; the library refuses memory outside its buffers)."""
    if isinstance(b, Buffer):
        return b.addr(), b.count, b.code
    ai = getattr(b, "__array_interface__", None)
    if ai is None:
        raise TypeError(f"not a Buffer or numpy array: {type(b).__name__}")
    if not b.flags["C_CONTIGUOUS"]:
        raise ValueError("the array is not contiguous")
    code = _NUMPY_CODES.get(b.dtype.str.lstrip("|"))
    if code is None:
        raise ValueError(f"element type {b.dtype} is not supported")
    return ai["data"][0], b.size, code


class Group:
    def __init__(self, client, h):
        self._c = client
        self._h = h

    @property
    def rank(self):
        """This trainer's rank (an elastic group's changes on re-form)."""
        return _lib.cs_group_rank(self._h)

    @property
    def size(self):
        """The group's size (an elastic group's changes on re-form)."""
        return _lib.cs_group_size(self._h)

    def _post(self, fn, *args, keep=()):
        if any(getattr(b, "device", False) for b in keep):
            _Cuda.sync()        # the trainer's kernels wrote the input
        req = ctypes.c_uint64()
        self._c._check(fn(self._h, *args, ctypes.byref(req)))
        return Request(self._c, req.value, keep)

    def _buf(self, b):
        """A Buffer or DeviceBuffer as is; a GPU array: its DeviceBuffer."""
        if b is None or isinstance(b, (Buffer, DeviceBuffer)):
            return b
        return self._c.device_buffer(b)

    def allreduce(self, send, recv=None, op="sum", count=None):
        """Post recv = op over ranks of send (in place if recv is None).
        send/recv: Buffers, or GPU arrays (torch, CuPy: see DeviceBuffer)."""
        send, recv = self._buf(send), self._buf(recv)
        recv = recv or send
        n = count or send.count
        return self._post(_lib.cs_allreduce, send.addr(), recv.addr(), n,
                          send.code, _REDOPS[op], keep=(send, recv))

    def reduce_scatter(self, send, recv, op="sum"):
        return self._post(_lib.cs_reduce_scatter, send.addr(),
                          recv.addr(), recv.count, send.code,
                          _REDOPS[op], keep=(send, recv))

    def all_gather(self, send, recv):
        return self._post(_lib.cs_all_gather, send.addr(), recv.addr(),
                          send.count, send.code, keep=(send, recv))

    def broadcast(self, buf, root=0):
        buf = self._buf(buf)
        return self._post(_lib.cs_broadcast, buf.addr(), buf.count,
                          buf.code, root, keep=(buf,))

    def split(self, color, key=None):
        """cs_group_split: every rank of this group calls it (in the same
        order as its other calls); the ranks giving the same color form a
        new group, ordered by key (default: this group's rank). color=None
        joins none and returns None. The new group may span any subset of
        the nodes."""
        h = ctypes.c_void_p()
        self._c._check(_lib.cs_group_split(
            self._h, -1 if color is None else color,
            self.rank() if key is None else key, ctypes.byref(h)))
        return Group(self._c, h) if h.value else None

    def barrier(self):
        return self._post(_lib.cs_barrier)

    def ps_table(self, name, dim, key_max, **kw):
        """A parameter-server table on this group, created collectively
        (collstack.ps.Table: push, pull, ipush, ipull, destroy; needs
        numpy)."""
        from .ps import Table
        return Table(self, name, dim, key_max, **kw)

    def moe_layer(self, tokens, hidden, topk, experts_per_rank=None,
                  expert_rank=None, node_sum=False, node_rows=False):
        """An MoE layer of this group (collstack.moe.MoELayer: dispatch
        and combine through the sidecar, the counts sent along with the
        rows; float32; needs numpy). node_sum=True: the combine sums each
        node's experts on that node (CS_MOE_LAYER_NODE_SUM); node_rows=True:
        the dispatch crosses to each node once per token
        (CS_MOE_LAYER_NODE_ROWS)."""
        from .moe import MoELayer
        return MoELayer(self, tokens, hidden, topk,
                        experts_per_rank=experts_per_rank,
                        expert_rank=expert_rank, node_sum=node_sum,
                        node_rows=node_rows)

    def alltoall(self, send, recv):
        """Post an all-to-all: block j of send (size/n elements) goes to
        rank j, where it lands as block i (i: this rank) of recv.
        send/recv: Buffers, or numpy arrays over shared memory (a
        Buffer's .numpy(), or a contiguous slice of one); the same
        element type and length, a multiple of the group's size, never
        overlapping. Returns the Request."""
        (sa, sn, sc), (ra, rn, rc) = _shared(send), _shared(recv)
        n = self.size
        if sc != rc or sn != rn:
            raise ValueError("alltoall: send and recv differ in type or "
                             f"length ({sn} and {rn} elements)")
        if n < 1 or sn == 0 or sn % n:
            raise ValueError(f"alltoall: {sn} elements is not a positive "
                             f"multiple of the group's size {n}")
        return self._post(_lib.cs_alltoall, sa, ra, sn // n, sc,
                          keep=(send, recv))

    def alltoallv(self, send, recv, sendcounts, recvcounts, sdispls=None,
                  rdispls=None):
        """Post an all-to-all with a count per pair (MPI_Alltoallv):
        sendcounts[j] elements at sdispls[j] of send go to rank j, where
        they land at rdispls[i] of recv (i: this rank); recvcounts[i] must
        equal what rank i sends here. Counts and displacements are in
        elements, one per rank; displacements default to the counts
        packed in rank order. send/recv: Buffers or numpy arrays over
        shared memory, one element type, not overlapping. A block outside
        its array raises ValueError here (nothing posted: the other ranks'
        call then fails at the sidecar's ipc.match_deadline); counts that
        do not add up across the ranks fail on every rank (CollstackError,
        CS_ERR_BAD_DESC), nothing sent. Returns the Request."""
        if not hasattr(_lib, "cs_alltoallv"):
            raise CollstackError(-95, "alltoallv: this libcollstack has "
                                 "no cs_alltoallv")
        (sa, sn, sc), (ra, rn, rc) = _shared(send), _shared(recv)
        n = self.size
        if sc != rc:
            raise ValueError("alltoallv: send and recv differ in type")

        def vec(name, v, default=None):
            if v is None:
                v, o = [], 0
                for c in default:
                    v.append(o)
                    o += c
            v = [int(x) for x in v]
            if len(v) != n or any(x < 0 for x in v):
                raise ValueError(f"alltoallv: {name} needs {n} entries, "
                                 f"none negative")
            return v
        scnt = vec("sendcounts", sendcounts)
        rcnt = vec("recvcounts", recvcounts)
        sdis = vec("sdispls", sdispls, scnt)
        rdis = vec("rdispls", rdispls, rcnt)
        for what, cnt, dis, total in (("send", scnt, sdis, sn),
                                      ("recv", rcnt, rdis, rn)):
            for j in range(n):
                if cnt[j] and dis[j] + cnt[j] > total:
                    raise ValueError(
                        f"alltoallv: {what} block {j} ({cnt[j]} elements "
                        f"at {dis[j]}) runs past the array's {total}")
        arr = ctypes.c_size_t * n
        return self._post(_lib.cs_alltoallv, sa, arr(*scnt), arr(*sdis), ra,
                          arr(*rcnt), arr(*rdis), sc, keep=(send, recv))


    def _p2p(self, fn, name, buf, peer, tag):
        if not hasattr(_lib, fn):
            raise CollstackError(-95, f"{name}: this libcollstack has no "
                                 f"{fn}")
        a, n, code = _shared(buf)
        if not 0 <= peer < self.size or peer == self.rank:
            raise ValueError(f"{name}: peer rank {peer} is not another "
                             f"rank of the group (size {self.size})")
        return self._post(getattr(_lib, fn), a, n, code, peer, tag,
                          keep=(buf,))

    def _rooted(self, fn, name, send, recv, root, per, *extra):
        if not hasattr(_lib, fn):
            raise CollstackError(-95, f"{name}: this libcollstack has no "
                                 f"{fn}")
        if not 0 <= root < self.size:
            raise ValueError(f"{name}: root {root} is not a rank of the "
                             f"group (size {self.size})")
        sa, sn, sc = _shared(send) if send is not None else (None, 0, 0)
        ra, rn, rc = _shared(recv) if recv is not None else (None, 0, sc)
        return self._post(getattr(_lib, fn), sa, ra, per(sn, rn), sc or rc,
                          *extra, root, keep=(send, recv))

    def reduce(self, send, recv=None, op="sum", root=0):
        """Post recv (on root) = op over ranks of send; recv is ignored
        on the other ranks (cs_reduce: a reduce-scatter, then each
        rank's block sent to root; an allreduce root keeps on one node
        and up to 64 KiB)."""
        return self._rooted("cs_reduce", "reduce", send, recv, root,
                            lambda sn, rn: sn, _REDOPS[op])

    def gather(self, send, recv=None, root=0):
        """Post: block i of recv on root = rank i's send (recv: size x
        len(send) elements on root, ignored elsewhere; point-to-point to
        the root)."""
        return self._rooted("cs_gather", "gather", send, recv, root,
                            lambda sn, rn: sn)

    def scatter(self, send, recv, root=0):
        """Post: recv of rank i = block i of send on root (send: size x
        len(recv) elements on root, ignored elsewhere)."""
        return self._rooted("cs_scatter", "scatter", send, recv, root,
                            lambda sn, rn: rn)

    def send(self, buf, dst, tag=0):
        """Post a send of buf (a Buffer, or a numpy array over shared
        memory) to rank dst: not collective, only dst takes part with a
        recv of the same size and tag; the k-th send to dst with a tag
        meets dst's k-th recv from this rank with that tag. buf may be
        reused as soon as this returns. Returns the Request."""
        return self._p2p("cs_send", "send", buf, dst, tag)

    def recv(self, buf, src, tag=0):
        """Post a receive into buf from rank src (see send). Returns the
        Request; buf holds the data once it completed."""
        return self._p2p("cs_recv", "recv", buf, src, tag)


class Client:
    """A connection to the local sidecar."""

    def __init__(self, path=None):
        h = ctypes.c_void_p()
        ret = _lib.cs_connect(path.encode() if path else None,
                              ctypes.byref(h))
        if ret:
            raise CollstackError(ret, f"connect to {path or 'sidecar'}")
        self._h = h
        self._dev = {}

    def device_buffer(self, obj):
        """The DeviceBuffer of a GPU array, registered once per
        (address, length, type) and cached."""
        arr = _device_array(obj)
        if arr is None:
            raise TypeError("not a CUDA array")
        b = self._dev.get(arr)
        if b is None:
            b = self._dev[arr] = DeviceBuffer(self, obj)
        return b

    def errmsg(self):
        return _lib.cs_errmsg(self._h).decode()

    def lost_node(self):
        """The node whose loss failed the last failed request, or -1."""
        return _lib.cs_lost_node(self._h)

    def _check(self, ret):
        if ret:
            raise CollstackError(ret, self.errmsg())

    def buffer(self, count, dtype="f32"):
        return Buffer(self, count, dtype)

    def join(self, name, rank=None, size=None, local_rank=None,
             local_size=None, elastic=False):
        """Join a group; without rank/size, from the launcher variables.

        elastic=True (CS_GROUP_ELASTIC): the group re-forms when a node
        is lost or joins (rank and size change: read them again after a
        step); rank=-1, size=-1 joins from a node that joined the cluster.
        """
        h = ctypes.c_void_p()
        if rank is None and not elastic:
            self._check(_lib.cs_group_join_env(self._h, name.encode(),
                                               ctypes.byref(h)))
        elif rank is None:
            # the launcher's numbers, elastic (COLLSTACK_ELASTIC=1)
            old = os.environ.get("COLLSTACK_ELASTIC")
            os.environ["COLLSTACK_ELASTIC"] = "1"
            try:
                self._check(_lib.cs_group_join_env(self._h, name.encode(),
                                                   ctypes.byref(h)))
            finally:
                if old is None:
                    del os.environ["COLLSTACK_ELASTIC"]
                else:
                    os.environ["COLLSTACK_ELASTIC"] = old
        else:
            self._check(_lib.cs_group_join_ex(
                self._h, name.encode(), rank, size,
                (0 if rank < 0 else rank) if local_rank is None
                else local_rank,
                (1 if size < 0 else size) if local_size is None
                else local_size,
                1 if elastic else 0, ctypes.byref(h)))
        return Group(self, h)

    def node_index(self):
        """cs_node_index: this trainer's sidecar's index among the nodes."""
        return _lib.cs_node_index(self._h)

    def join_nodes(self, name, rank, size, local_rank, local_size, nodes):
        """cs_group_join_nodes: a group over the nodes in `nodes` only
        (node_index() of a trainer on each)."""
        h = ctypes.c_void_p()
        arr = (ctypes.c_int * max(1, len(nodes)))(*nodes)
        self._check(_lib.cs_group_join_nodes(
            self._h, name.encode(), rank, size, local_rank, local_size,
            arr, len(nodes), ctypes.byref(h)))
        return Group(self, h)

    def close(self):
        if self._h:
            self._dev.clear()
            _lib.cs_disconnect(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
