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
        "cs_group_rank": (i, [p]),
        "cs_group_size": (i, [p]),
        "cs_group_leave": (i, [p]),
        "cs_allreduce": (i, [p, p, p, sz, i, i, ctypes.POINTER(u64)]),
        "cs_reduce_scatter": (i, [p, p, p, sz, i, i,
                                  ctypes.POINTER(u64)]),
        "cs_all_gather": (i, [p, p, p, sz, i, ctypes.POINTER(u64)]),
        "cs_broadcast": (i, [p, p, sz, i, i, ctypes.POINTER(u64)]),
        "cs_barrier": (i, [p, ctypes.POINTER(u64)]),
        "cs_test": (i, [p, u64]),
        "cs_wait": (i, [p, u64, ctypes.c_int64]),
        "cs_event_fd": (i, [p]),
        "cs_event_arm": (i, [p]),
    }
    for fn, (res, args) in sigs.items():
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


class Group:
    def __init__(self, client, h):
        self._c = client
        self._h = h
        self.rank = _lib.cs_group_rank(h)
        self.size = _lib.cs_group_size(h)

    def _post(self, fn, *args, keep=()):
        req = ctypes.c_uint64()
        self._c._check(fn(self._h, *args, ctypes.byref(req)))
        return Request(self._c, req.value, keep)

    def allreduce(self, send, recv=None, op="sum", count=None):
        """Post recv = op over ranks of send (in place if recv is None)."""
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
        return self._post(_lib.cs_broadcast, buf.addr(), buf.count,
                          buf.code, root, keep=(buf,))

    def barrier(self):
        return self._post(_lib.cs_barrier)


class Client:
    """A connection to the local sidecar."""

    def __init__(self, path=None):
        h = ctypes.c_void_p()
        ret = _lib.cs_connect(path.encode() if path else None,
                              ctypes.byref(h))
        if ret:
            raise CollstackError(ret, f"connect to {path or 'sidecar'}")
        self._h = h

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
             local_size=None):
        """Join a group; without rank/size, from the launcher variables."""
        h = ctypes.c_void_p()
        if rank is None:
            self._check(_lib.cs_group_join_env(self._h, name.encode(),
                                               ctypes.byref(h)))
        else:
            self._check(_lib.cs_group_join(
                self._h, name.encode(), rank, size,
                rank if local_rank is None else local_rank,
                size if local_size is None else local_size,
                ctypes.byref(h)))
        return Group(self, h)

    def close(self):
        if self._h:
            _lib.cs_disconnect(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
