# SPDX-License-Identifier: MIT
"""The Python binding's reading of GPU arrays, without a GPU: fake objects
with __cuda_array_interface__ and DLPack capsules built here (a
DLManagedTensor in ctypes memory) must give the right address, element
count and type, and non-contiguous, host or unsupported arrays must be
refused or passed over.

    python3 test_python_dev.py LIBCOLLSTACK"""
import ctypes
import os
import sys

os.environ["COLLSTACK_LIB"] = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "python"))
import collstack  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what)


class CAI:
    def __init__(self, **kw):
        self.__cuda_array_interface__ = dict(version=3, **kw)
        self.__cuda_array_interface__.setdefault("strides", None)


d = collstack._device_array
check(d(CAI(data=(0x7000, False), shape=(4, 3), typestr="<f4")) ==
      (0x7000, 12, "f32"), "CAI f32 4x3")
check(d(CAI(data=(0x7000, False), shape=(5,), typestr="<f2")) ==
      (0x7000, 5, "f16"), "CAI f16")
check(d(CAI(data=(0x7000, False), shape=(2, 3), typestr="<f8",
            strides=None)) == (0x7000, 6, "f64"), "CAI f64")
o = CAI(data=(0x7000, False), shape=(2, 3), typestr="<f4")
o.__cuda_array_interface__["strides"] = (12, 4)   # C order, explicit
check(d(o) == (0x7000, 6, "f32"), "CAI explicit C strides")
o.__cuda_array_interface__["strides"] = (4, 8)    # transposed
try:
    d(o)
    check(False, "transposed CAI accepted")
except ValueError:
    pass
try:
    d(CAI(data=(0x7000, False), shape=(2,), typestr="<c8"))
    check(False, "complex accepted")
except ValueError:
    pass
check(d(b"host bytes") is None, "host object passed over")


# ---- DLPack ----------------------------------------------------------------
class DLManaged(ctypes.Structure):
    _fields_ = [("t", collstack._DLTensor), ("ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


keep = []


class DL:
    def __init__(self, dev_type, code, bits, shape, strides=None, off=0):
        self.dev_type = dev_type
        m = DLManaged()
        shp = (ctypes.c_int64 * len(shape))(*shape)
        st = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        m.t.data = 0x9000
        m.t.device.device_type = dev_type
        m.t.ndim = len(shape)
        m.t.dtype.code, m.t.dtype.bits, m.t.dtype.lanes = code, bits, 1
        m.t.shape = ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64))
        if st:
            m.t.strides = ctypes.cast(st, ctypes.POINTER(ctypes.c_int64))
        m.t.byte_offset = off
        keep.extend([m, shp, st])
        self.m = m

    def __dlpack_device__(self):
        return (self.dev_type, 0)

    def __dlpack__(self):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.m), b"dltensor", None)


check(d(DL(2, 4, 16, (3, 5))) == (0x9000, 15, "bf16"), "DLPack bf16")
check(d(DL(2, 2, 32, (8,), off=16)) == (0x9010, 8, "f32"),
      "DLPack f32 with byte offset")
check(d(DL(2, 2, 32, (2, 3), strides=(3, 1))) == (0x9000, 6, "f32"),
      "DLPack explicit C strides")
try:
    d(DL(2, 2, 32, (2, 3), strides=(1, 2)))
    check(False, "DLPack transposed accepted")
except ValueError:
    pass
check(d(DL(1, 2, 32, (4,))) is None, "DLPack on the CPU passed over")
try:
    d(DL(2, 5, 64, (4,)))   # complex
    check(False, "DLPack complex accepted")
except ValueError:
    pass
print(f"test_python_dev: {fails} failed")
sys.exit(1 if fails else 0)
