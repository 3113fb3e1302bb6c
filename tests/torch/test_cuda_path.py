# SPDX-License-Identifier: MIT
"""The torch backend's GPU path without a GPU (docs/torch.md, "CUDA
tensors"): the cache of CUDA tensors' registrations with the sidecar
(_DevRegs) and the choice between the GPU path and host staging
(_Runtime.dev_use), through fake CUDA and libcollstack calls; and the
devices the backend takes. The real calls run in scripts/gpu-check.sh.

    python3 test_cuda_path.py LIBCOLLSTACK"""
import os
import sys
import types
import warnings

os.environ["COLLSTACK_LIB"] = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "python"))
try:
    import torch
except ImportError:
    print("no torch: skipped")
    sys.exit(77)
import collstack  # noqa: E402
import collstack.torch as ct  # noqa: E402

fails = 0
checks = 0


def check(cond, what):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
        print("FAIL:", what)


class FakeCuda:
    """Allocations: base -> (size, handle id). describe() answers like
    _Cuda.describe; register / free record the calls."""

    def __init__(self):
        self.allocs = {}
        self.calls = []
        self.live = set()
        self.next = 1           # registration handles
        self.hid = 1            # allocations' IPC handles
        self.refuse = 0

    def alloc(self, base, size):
        self.allocs[base] = (size, self.hid)
        self.hid += 1

    def describe(self, ptr):
        for base, (size, hid) in self.allocs.items():
            if base <= ptr < base + size:
                m = collstack._DevMem(kind=1, fd=-1, base=base,
                                      alloc_len=size)
                m.handle[0] = hid
                return m
        raise collstack.CollstackError(-5, "cuPointerGetAttribute failed")

    def register(self, m, off, n):
        if self.refuse:
            return self.refuse, None
        h = ("h", self.next)
        self.next += 1
        self.calls.append(("reg", m.base, off, n, m.handle[0]))
        self.live.add(h)
        return 0, h

    def free(self, h):
        self.calls.append(("free", h))
        check(h in self.live, f"free of {h}: not registered or freed twice")
        self.live.discard(h)


def regs_of(f, cap):
    return ct._DevRegs(f.describe, f.register, f.free, cap)


# ---- the cache ---------------------------------------------------------------
f = FakeCuda()
f.alloc(0x10000, 1 << 20)
r = regs_of(f, 2)
u1 = r.use(0x10000 + 4096, 8192)
check(f.calls == [("reg", 0x10000, 4096, 8192, 1)],
      f"first use registers the range at its offset: {f.calls}")
r.put(u1)
u2 = r.use(0x10000 + 4096, 8192)
check(len(f.calls) == 1 and u2.reg is u1.reg,
      "the same range again: cached, not registered again")
r.put(u2)

# the memory went back to the driver; a new allocation at the same address
del f.allocs[0x10000]
f.alloc(0x10000, 1 << 20)
u3 = r.use(0x10000 + 4096, 8192)
check([c[0] for c in f.calls] == ["reg", "free", "reg"] and
      f.calls[2][4] == 2,
      f"another allocation at the same address: old freed, new handle "
      f"registered: {f.calls}")

# replaced while in use: freed when the op is done, not before
del f.allocs[0x10000]
f.alloc(0x10000, 1 << 20)
u4 = r.use(0x10000 + 4096, 8192)
check(f.calls[-1][0] == "reg" and u3.reg.handle in f.live,
      "a registration in use is not freed when replaced")
r.put(u3)
check(u3.reg.handle not in f.live, "... and is freed when its op is done")
r.put(u4)

# least recently used first, never one in use
f.alloc(0x900000, 1 << 20)
a = r.use(0x900000, 64)          # 2 cached now: u4's range, a
b_key = (0x900000 + 64, 64)
r.put(a)
hold = r.use(0x10000 + 4096, 8192)   # u4's range in use, most recent
b = r.use(*b_key)                    # evicts a (LRU, unused)
check(a.reg.handle not in f.live and hold.reg.handle in f.live and
      len(r.regs) == 2, f"LRU eviction of the unused one: {f.calls[-3:]}")
c = r.use(0x900000 + 512, 64)        # nothing unused: over the cap
check(len(r.regs) == 3 and hold.reg.handle in f.live and
      b.reg.handle in f.live, "in-use registrations are never evicted")
for u in (hold, b, c):
    r.put(u)
d = r.use(0x900000 + 1024, 64)
check(len(r.regs) == 2, f"back to the cap once unused: {len(r.regs)}")
r.put(d)

# refused by the sidecar: raised, nothing cached
f.refuse = -22
try:
    r.use(0x900000 + 2048, 64)
    check(False, "a refused registration raised nothing")
except collstack.CollstackError as e:
    check(e.code == -22, f"refusal's code kept: {e.code}")
check((0x900000 + 2048, 64) not in r.regs, "a refusal is not cached")
f.refuse = 0
r.clear()
check(not f.live, f"clear frees every registration: {f.live}")


# ---- the choice: GPU path, staging, errors ----------------------------------
class FakeT:
    def __init__(self, ptr, n, contig=True):
        self.ptr, self.n, self.contig = ptr, n, contig

    def is_contiguous(self):
        return self.contig

    def data_ptr(self):
        return self.ptr

    def numel(self):
        return self.n

    def element_size(self):
        return 4


class FakeClient:
    def errmsg(self):
        return "this sidecar has no GPU support"


f = FakeCuda()
f.alloc(0x40000, 1 << 16)
rt = types.SimpleNamespace(cuda_mode="device", dev=regs_of(f, 4),
                           client=FakeClient())
staged = []
addr = ct._Runtime.dev_use(rt, FakeT(0x40000 + 256, 16), staged)
check(addr == 0x40000 + 256 and len(staged) == 1 and
      isinstance(staged[0], ct._DevUse), "contiguous: the GPU path")
check(ct._Runtime.dev_use(rt, FakeT(0x40000, 16, False), []) is None,
      "non-contiguous: staged")
check(ct._Runtime.dev_use(rt, FakeT(0x40000, 0), []) is None,
      "empty: staged (nothing to register)")
f.refuse = -ct.EOPNOTSUPP
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    got = ct._Runtime.dev_use(rt, FakeT(0x40000 + 512, 16), [])
check(got is None and rt.cuda_mode == "stage" and len(w) == 1 and
      "no GPU support" in str(w[0].message),
      "a sidecar without GPU support: staged from then on, said once")
f.refuse = 0
n = len(f.calls)
check(ct._Runtime.dev_use(rt, FakeT(0x40000 + 1024, 16), []) is None and
      len(f.calls) == n, "stage mode: nothing registered")
rt.cuda_mode = "device"
f.refuse = -22
try:
    ct._Runtime.dev_use(rt, FakeT(0x40000 + 2048, 16), [])
    check(False, "another refusal was not raised")
except ct.CollstackTorchError as e:
    check("registering a CUDA tensor of 64 bytes" in str(e), str(e))
f.refuse = 0
# the op's staging list gives the registration back
ct._Runtime.unstage(rt, staged)
check(staged[0].reg.refs == 0, "unstage releases the op's registration")

# ---- devices -----------------------------------------------------------------
ct._check_cpu("allreduce", [torch.zeros(2)])
try:
    ct._check_cpu("allreduce", [torch.empty(2, device="meta")])
    check(False, "a meta tensor was taken")
except ct.CollstackTorchError as e:
    check("CPU and CUDA tensors" in str(e), str(e))

os.environ["COLLSTACK_TORCH_CUDA"] = "gpu"
try:
    ct._Runtime()
    check(False, "COLLSTACK_TORCH_CUDA=gpu accepted")
except ct.CollstackTorchError as e:
    check("COLLSTACK_TORCH_CUDA='gpu'" in str(e), str(e))
except collstack.CollstackError:
    check(False, "the mode must be checked before connecting")

print(f"test_cuda_path: {checks} checks, {fails} failed")
sys.exit(1 if fails else 0)
