# SPDX-License-Identifier: MIT
"""One rank of an all-to-all check (run by run_local.py): Group.alltoall
on numpy views of shared buffers, every element checked, each dtype;
bad input (lengths that differ, not a multiple of the size, memory
outside the buffers) refused with a clear error, and the group goes on.
Prints "alltoall ok rank R of N" and exits 0, or 1 with what was wrong.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import collstack  # noqa: E402


def main():
    c = collstack.Client()
    g = c.join("a2a")
    n, r = g.size, g.rank
    bad = 0
    for dtype, npt in (("f32", np.float32), ("i64", np.int64),
                       ("u8", np.uint8)):
        for per in (1, 5, 4096):
            sb, rb = c.buffer(n * per, dtype), c.buffer(n * per, dtype)
            send, recv = sb.numpy(), rb.numpy()
            # block j: (sender, destination, index) encoded
            j = np.repeat(np.arange(n), per)
            x = np.tile(np.arange(per), n)
            send[:] = ((r * 31 + j * 7 + x) % 251).astype(npt)
            recv[:] = 0
            g.alltoall(send, recv).wait()
            i = np.repeat(np.arange(n), per)
            want = ((i * 31 + r * 7 + x) % 251).astype(npt)
            wrong = int(np.count_nonzero(recv != want))
            if wrong:
                print(f"rank {r}: {dtype} x {per}: {wrong} wrong")
                bad += 1
            sb.free()
            rb.free()
    # bad input, refused before anything is posted or by the library
    sb, rb = c.buffer(4 * n, "f32"), c.buffer(4 * n, "f32")
    cases = [(lambda: g.alltoall(sb.numpy(), rb.numpy()[:-1]), ValueError),
             (lambda: g.alltoall(sb.numpy()[:n + 1], rb.numpy()[:n + 1]),
              ValueError if n > 1 else None),
             (lambda: g.alltoall(np.zeros(4 * n, np.float32), rb.numpy()),
              collstack.CollstackError)]
    for k, (f, exc) in enumerate(cases):
        if exc is None:
            continue
        try:
            f().wait()
            print(f"rank {r}: bad case {k} was accepted")
            bad += 1
        except exc as e:
            if r == 0:
                print(f"bad case {k} refused: {e}")
    # and a good one after them
    send, recv = sb.numpy(), rb.numpy()
    send[:] = r
    g.alltoall(send, recv).wait()
    if not np.array_equal(recv, np.repeat(np.arange(n), 4).astype(
            np.float32)):
        print(f"rank {r}: the all-to-all after the bad ones was wrong")
        bad += 1
    g.barrier().wait()
    if bad:
        return 1
    print(f"alltoall ok rank {r} of {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
