# SPDX-License-Identifier: MIT
"""Strategies per parameter group (collstack/strategy.h) from Python.

    import collstack
    from collstack.strategy import Job
    job = Job(client, group, config="strategies.conf")   # or job.add(...)
    for step in range(steps):
        if step == 50:
            job.request("embedding", "rs-ag")   # any one rank may ask
        job.step(step)                          # every rank, every step
        job.exchange("mlp", grad_buffer)        # a collstack.Buffer

job.step() agrees on switches through the group (a small allreduce), so
every rank changes a group's strategy at the same step. A strategy that
cannot run ("ps" where the sidecar has no parameter server) is refused
with its reason (StrategyError), and the group keeps its strategy.
"""

import ctypes

from . import _lib, CollstackError

_p, _i, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
for _fn, (_res, _args) in {
        "cs_strat_job_open": (_i, [_p, _p, ctypes.POINTER(_p)]),
        "cs_strat_job_close": (None, [_p]),
        "cs_strat_job_add": (_i, [_p, ctypes.c_char_p, ctypes.c_char_p,
                                  ctypes.POINTER(ctypes.c_uint)]),
        "cs_strat_job_config": (_i, [_p, ctypes.c_char_p]),
        "cs_strat_job_find": (_i, [_p, ctypes.c_char_p]),
        "cs_strat_job_request": (_i, [_p, ctypes.c_uint, ctypes.c_char_p]),
        "cs_strat_job_step": (_i, [_p, ctypes.c_uint64]),
        "cs_strat_job_exchange": (_i, [_p, ctypes.c_uint, _p, _sz, _i]),
        "cs_strat_job_current": (ctypes.c_char_p, [_p, ctypes.c_uint]),
        "cs_strat_job_errmsg": (ctypes.c_char_p, [_p]),
}.items():
    _f = getattr(_lib, _fn)
    _f.restype, _f.argtypes = _res, _args


class StrategyError(CollstackError):
    """A strategy call failed: .code and the message say why."""


class Job:
    """The parameter groups of one trainer and their strategies."""

    def __init__(self, client, group, config=None):
        h = ctypes.c_void_p()
        ret = _lib.cs_strat_job_open(client._h, group._h, ctypes.byref(h))
        if ret:
            raise StrategyError(ret, "cs_strat_job_open")
        self._h = h
        if config:
            self._check(_lib.cs_strat_job_config(self._h, config.encode()))

    def _check(self, ret):
        if ret:
            raise StrategyError(ret, self.errmsg())

    def errmsg(self):
        return _lib.cs_strat_job_errmsg(self._h).decode()

    def _index(self, name):
        i = _lib.cs_strat_job_find(self._h, name.encode())
        if i < 0:
            raise KeyError(name)
        return i

    def add(self, name, strategy):
        self._check(_lib.cs_strat_job_add(self._h, name.encode(),
                                          strategy.encode(), None))

    def request(self, name, strategy):
        self._check(_lib.cs_strat_job_request(self._h, self._index(name),
                                              strategy.encode()))

    def step(self, step):
        self._check(_lib.cs_strat_job_step(self._h, step))

    def exchange(self, name, buf, count=None, index=0):
        """Exchange `count` elements of Buffer `buf` from element `index`
        (in place) with the group's current strategy."""
        n = buf.count - index if count is None else count
        if index < 0 or n < 0 or index + n > buf.count:
            raise ValueError("elements outside the buffer")
        self._check(_lib.cs_strat_job_exchange(
            self._h, self._index(name), buf.addr(index), n, buf.code))

    def current(self, name):
        return _lib.cs_strat_job_current(self._h, self._index(name)).decode()

    def close(self):
        if self._h:
            _lib.cs_strat_job_close(self._h)
            self._h = None
