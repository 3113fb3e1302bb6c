# SPDX-License-Identifier: MIT
"""The reference of tests/netns/test_ps_trainers.sh pstr_4x1_recover,
computed apart from collstack: the table is read from the checkpoint's
shard files themselves (collectives/ps/ps_io.c, format version 4: rows
and momentum state), then versions CKPT .. END-1 of cs-trainer-ps recover
(ranks 0 .. WORKERS-1, the group re-formed on the nodes left) are
replayed in one process (f32 arithmetic, each operation rounded to f32
as C does it: the products and sums of these f32 values are exact in
double, so rounding the double result once is the f32 result) and the
result compared, bit for bit, with DIR/final.f32, the table the trainers
pulled at the end. No numpy needed.

    ps_recover_check.py DIR --shards 4 --workers 3 [--ckpt 6 --end 12]

Prints "ps_recover_ref ok shards=N ckpt_rows=R clock=C workers=W
versions=V rows=600 differing_values=0" or "ps_recover_ref FAIL ...".
"""

import argparse
import os
import struct
import sys

ROWS, DIM, KPP = 600, 4, 40
LR = MOMENTUM = 0.5
HDR = 4096
# struct ckpt_hdr (host order, no padding: ps_io.c asserts the offsets)
HDR_FMT = "<8sIIIIQQQQIIIIIIQI6fIQfIIIQQ"
FNV_OFF, FNV_PRIME = 0xcbf29ce484222325, 0x100000001b3


def fnv(data, h=FNV_OFF):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC32C = _crc32c_table()


def crc32c(data):
    """The records' checksum of versions 3-4 (CRC-32C, ps_io.c data_sum)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283   # the standard check value


def f32(x):
    """x rounded to the nearest f32 (as a Python float)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def read_shard(path):
    raw = open(path, "rb").read()
    f = struct.unpack_from(HDR_FMT, raw)
    (magic, version, endian, hdr_bytes, frame_bytes, nrec, clock,
     data_bytes, data_sum, _id, dim, _dtype, _mode, _stale, _workers,
     key_max, _opt) = f[:17]
    shard, nshards = f[-5], f[-4]
    if magic != b"CSPSCKP1" or version != 4 or endian != 0x01020304:
        raise ValueError(f"{path}: not a version 4 checkpoint")
    if fnv(raw[:struct.calcsize(HDR_FMT) - 8]) != f[-1]:
        raise ValueError(f"{path}: header checksum")
    if dim != DIM or key_max != ROWS or len(raw) != HDR + data_bytes:
        raise ValueError(f"{path}: another table or size")
    if crc32c(raw[HDR:]) != data_sum:
        raise ValueError(f"{path}: record checksum")
    rec = 16 + frame_bytes
    state_off = 16 + (DIM * 4 + 7) // 8 * 8
    out = []
    for i in range(nrec):
        p = HDR + i * rec
        key = struct.unpack_from("<Q", raw, p)[0]
        w = list(struct.unpack_from(f"<{DIM}f", raw, p + 16))
        m = list(struct.unpack_from(f"<{DIM}f", raw, p + state_off))
        out.append((key, w, m))
    return shard, nshards, clock, out


def step_keys(r, s):
    keys = []
    for i in range(KPP):
        keys.append(keys[i - 1] if i % 5 == 4
                    else (r * 7919 + s * 104729 + i * 31) % ROWS)
    return keys


def grad(r, s, key, j):
    return (1 + (r + 3 * s + key + j) % 8) / 64.0  # exact in f32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--shards", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--ckpt", type=int, default=6)
    ap.add_argument("--end", type=int, default=12)
    a = ap.parse_args()

    w = [[1.0] * DIM for _ in range(ROWS)]  # the initializer: constant 1
    m = [[0.0] * DIM for _ in range(ROWS)]
    seen, clocks = set(), set()
    for s in range(a.shards):
        shard, nshards, clock, recs = read_shard(
            os.path.join(a.dir, f"rc.shard{s}.ckpt"))
        if shard != s or nshards != a.shards:
            print(f"ps_recover_ref FAIL file {s}: shard {shard} of {nshards}")
            return 1
        clocks.add(clock)
        for key, row, state in recs:
            if key in seen:
                print(f"ps_recover_ref FAIL key {key} in two files")
                return 1
            seen.add(key)
            w[key], m[key] = row, state
    if clocks != {a.ckpt}:
        print(f"ps_recover_ref FAIL clocks {sorted(clocks)}, want {a.ckpt}")
        return 1
    for v in range(a.ckpt, a.end):
        g = {}  # key -> the gradients of every worker, summed
        for r in range(a.workers):
            for key in step_keys(r, v):
                row = g.setdefault(key, [0.0] * DIM)
                for j in range(DIM):
                    row[j] = f32(row[j] + grad(r, v, key, j))
        for key, row in g.items():  # one momentum step per touched row
            for j in range(DIM):
                m[key][j] = f32(f32(MOMENTUM * m[key][j]) + row[j])
                w[key][j] = f32(w[key][j] - f32(LR * m[key][j]))
    raw = open(os.path.join(a.dir, "final.f32"), "rb").read()
    if len(raw) != ROWS * DIM * 4:
        print(f"ps_recover_ref FAIL final.f32 is {len(raw)} bytes")
        return 1
    final = struct.unpack(f"<{ROWS * DIM}f", raw)
    diff = sum(struct.pack("<f", final[k * DIM + j]) !=
               struct.pack("<f", w[k][j])
               for k in range(ROWS) for j in range(DIM))
    print(f"ps_recover_ref {'ok' if diff == 0 else 'FAIL'} "
          f"shards={a.shards} ckpt_rows={len(seen)} clock={a.ckpt} "
          f"workers={a.workers} versions={a.end - a.ckpt} rows={ROWS} "
          f"differing_values={diff}")
    return 0 if diff == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
