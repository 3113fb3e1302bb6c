# SPDX-License-Identifier: MIT
"""Python's point-to-point and rooted calls on one rank (run by
tests/netns/test_p2p.sh under `collstack launch`): Group.send/recv around
the ring with two tags, Group.reduce, gather and scatter from a root each,
every element checked; a peer that is the rank itself refused. Prints
"python p2p ok rank R" or raises.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "python"))
import collstack  # noqa: E402


def main():
    c = collstack.Client()
    g = c.join(os.environ.get("P2P_GROUP", "p2p-py"))
    n, r = g.size, g.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    s1, s2 = c.buffer(1000, "f64"), c.buffer(1000, "f64")
    r1, r2 = c.buffer(1000, "f64"), c.buffer(1000, "f64")
    s1.numpy()[:] = r * 10 + np.arange(1000)
    s2.numpy()[:] = -r
    q = [g.recv(r2.numpy(), prv, tag=9), g.recv(r1, prv, tag=4),
         g.send(s1, nxt, tag=4), g.send(s2.numpy(), nxt, tag=9)]
    for x in q:
        x.wait()
    assert (r1.numpy() == prv * 10 + np.arange(1000)).all(), "tag 4"
    assert (r2.numpy() == -prv).all(), "tag 9"
    try:
        g.send(s1, r)
        raise SystemExit("a send to itself was not refused")
    except ValueError:
        pass
    x = c.buffer(10, "f32")
    x.numpy()[:] = r + 1
    y = c.buffer(10, "f32")
    g.reduce(x, y, root=n - 1).wait()
    if r == n - 1:
        assert (y.numpy() == n * (n + 1) / 2).all(), "reduce"
    a = c.buffer(10 * n, "f32")
    g.gather(x, a if r == 0 else None, root=0).wait()
    if r == 0:
        assert (a.numpy().reshape(n, 10)[:, 0] ==
                np.arange(1, n + 1)).all(), "gather"
    root = 1 % n
    if r == root:
        a.numpy()[:] = np.repeat(np.arange(n) * 5, 10)
    b = c.buffer(10, "f32")
    g.scatter(a if r == root else None, b, root=root).wait()
    assert (b.numpy() == r * 5).all(), "scatter"
    print(f"python p2p ok rank {r}", flush=True)


if __name__ == "__main__":
    main()
