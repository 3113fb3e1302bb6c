# SPDX-License-Identifier: MIT
"""One rank of an all-to-all-v check (run by run_local.py): Group.alltoallv
on numpy views of shared buffers, each dtype, counts per pair with empty
blocks, a rank that sends nothing and a rank that receives everything;
every element of the receive array checked (the gaps between blocks too).
Then counts that do not add up (refused on every rank, nothing written)
and a block past its array (refused here), and a proper one after them.
Prints "alltoallv ok rank R of N" and exits 0, or 1 with what was wrong.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import collstack  # noqa: E402


def matrix(n, shape, per):
    """Elements from i to j, the same on every rank."""
    m = [[((i * 3 + j * 5) % 7) * per for j in range(n)] for i in range(n)]
    if shape == "silent":           # rank 1 sends nothing
        m[1] = [0] * n
    elif shape == "sink":           # everything goes to rank 0
        m = [[per * 9 if j == 0 else 0 for j in range(n)]
             for i in range(n)]
    return m


def layout(m, r, n):
    """This rank's arrays: sends in reverse rank order with a gap of 1,
    receives in rank order with a gap of 2; the receive span."""
    sc = [m[r][j] for j in range(n)]
    rc = [m[i][r] for i in range(n)]
    sd, o = [0] * n, 0
    for j in reversed(range(n)):
        sd[j] = o
        o += sc[j] + 1
    rd, o = [0] * n, 0
    for i in range(n):
        rd[i] = o
        o += rc[i] + 2
    return sc, sd, rc, rd, o


def value(i, j, x, npt):
    return ((i * 31 + j * 7 + x) % 251).astype(npt)


def main():
    c = collstack.Client()
    g = c.join("a2av")
    n, r = g.size, g.rank
    bad = 0
    sb, rb = c.buffer(1 << 16, "u8"), c.buffer(1 << 16, "u8")
    for dtype, npt in (("f32", np.float32), ("i64", np.int64),
                       ("u8", np.uint8)):
        for shape in ("plain", "silent", "sink"):
            for per in (1, 37):
                m = matrix(n, shape, per)
                sc, sd, rc, rd, ext = layout(m, r, n)
                send = sb.numpy().view(npt)
                recv = rb.numpy().view(npt)[:ext]
                for j in range(n):
                    send[sd[j]:sd[j] + sc[j]] = value(
                        r, j, np.arange(sc[j]), npt)
                recv[:] = 0x5a
                g.alltoallv(send, recv, sc, rc, sd, rd).wait()
                want = np.full(ext, 0x5a, dtype=npt)
                for i in range(n):
                    want[rd[i]:rd[i] + rc[i]] = value(
                        i, r, np.arange(rc[i]), npt)
                wrong = int(np.count_nonzero(recv != want))
                if wrong:
                    print(f"rank {r}: {dtype} {shape} x {per}: {wrong} "
                          f"wrong")
                    bad += 1
    # counts that do not add up: rank n-1 expects one more from rank 0
    m = matrix(n, "plain", 4)
    sc, sd, rc, rd, ext = layout(m, r, n)
    send, recv = sb.numpy().view(np.float32), rb.numpy().view(np.float32)
    if r == n - 1:
        rc[0] += 1
    recv[:ext] = -1
    try:
        g.alltoallv(send, recv, sc, rc, sd, rd).wait()
        print(f"rank {r}: counts that do not add up were accepted")
        bad += 1
    except collstack.CollstackError as e:
        if "do not add up" not in str(e):
            print(f"rank {r}: unclear error: {e}")
            bad += 1
        elif r == 0:
            print(f"refused: {e}")
    if np.count_nonzero(recv[:ext] != -1):
        print(f"rank {r}: the refused call wrote to recv")
        bad += 1
    # a block past its array: refused here, before anything is posted
    try:
        g.alltoallv(send[:4], recv, [5] * n, [0] * n)
        print(f"rank {r}: a block past the array was accepted")
        bad += 1
    except ValueError:
        pass
    # and a proper one after them
    sc, sd, rc, rd, ext = layout(m, r, n)
    for j in range(n):
        send[sd[j]:sd[j] + sc[j]] = r + 1
    g.alltoallv(send, recv, sc, rc, sd, rd).wait()
    for i in range(n):
        if np.count_nonzero(recv[rd[i]:rd[i] + rc[i]] != i + 1):
            print(f"rank {r}: the all-to-all-v after the bad ones was "
                  f"wrong")
            bad += 1
    g.barrier().wait()
    if bad:
        return 1
    print(f"alltoallv ok rank {r} of {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
