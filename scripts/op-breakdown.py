#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Where a trainer operation's time goes, step by step.

Reads what a traced run left in DIR:

  ipc-<node>.txt      collstackd with --set ipc.trace_dir=DIR: per
                      cross-node operation, when the trainer service
                      (lcore 0 with ipc.on_lcore, else the IPC thread)
                      launched it, the lcore picked it up, its result was
                      ready, its last frame was acknowledged, and the
                      service saw the verdict (written when the sidecar
                      stops)
  trainer-<rank>.txt  cs-trainer-bench (collstack bench) with
                      COLLSTACK_BENCH_TRACE_DIR=DIR: per operation, when
                      the trainer posted it and saw it complete

All times are CLOCK_MONOTONIC, one clock for every namespace. One trainer
per node, rank r on node r (what `collstack bench` starts by default).

  scripts/cluster.sh up 4 --set ipc.trace_dir=/tmp/tr
  COLLSTACK_BENCH_TRACE_DIR=/tmp/tr build/tools/collstack bench -o allreduce -b 4K -e 4K -n 1000
  scripts/cluster.sh down        # the sidecars write their files as they stop
  scripts/op-breakdown.py /tmp/tr

Prints, per size and place, the median and 90th percentile of each step
over the timed iterations (warm-ups left out). Exit status 1 when nothing
could be matched.
"""
import bisect
import glob
import os
import re
import sys

BARRIER = 4  # CS_IPC_INTER_BARRIER (control/ipc/ipc_server.h)

STEPS = [
    ("the trainers' posts, first to last", "spread"),
    ("trainer post -> sidecar launches it", "launch"),
    ("launch -> lcore picks it up", "pick"),
    ("lcore picks it up -> every peer's data in", "ready"),
    ("result ready -> last ACK in", "done"),
    ("last ACK -> sidecar sees the verdict", "seen"),
    ("sidecar -> trainer sees completion", "end"),
    ("last post -> last completion (critical path)", "critical"),
    ("reported time (slowest rank, post -> completion)", "reported"),
]


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def read_rows(path, ncols):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = line.split()
            if len(fields) != ncols:
                raise ValueError(f"{path}: bad line: {line.strip()}")
            rows.append(fields)
    return rows


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    d = sys.argv[1]
    ipc, tr = {}, {}
    for p in glob.glob(os.path.join(d, "ipc-*.txt")):
        node = int(re.search(r"ipc-(\d+)\.txt$", p).group(1))
        recs = [tuple(int(x) for x in r) for r in read_rows(p, 8)]
        recs = [r for r in recs if r[1] != BARRIER]
        recs.sort(key=lambda r: r[3])
        ipc[node] = recs
    for p in glob.glob(os.path.join(d, "trainer-*.txt")):
        rank = int(re.search(r"trainer-(\d+)\.txt$", p).group(1))
        tr[rank] = [(int(r[0]), r[1], int(r[2]), float(r[3]), float(r[4]))
                    for r in read_rows(p, 5)]
    ranks = sorted(tr)
    if not ranks or sorted(ipc) != ranks:
        print(f"op-breakdown: {d}: trainer files for ranks {ranks}, "
              f"sidecar files for nodes {sorted(ipc)}: they must pair up",
              file=sys.stderr)
        return 1
    groups = {}  # (bytes, place, it) -> {rank: (posted, completed, rec)}
    unmatched = 0
    for r in ranks:
        launched = [x[3] for x in ipc[r]]
        for nbytes, place, it, posted, completed in tr[r]:
            if it < 0:
                continue
            k = bisect.bisect_left(launched, posted)
            if k == len(launched) or ipc[r][k][7] > completed:
                unmatched += 1
                continue
            groups.setdefault((nbytes, place, it), {})[r] = (
                posted, completed, ipc[r][k])
    sizes = {}
    for (nbytes, place, it), g in groups.items():
        if len(g) != len(ranks):
            unmatched += len(g)
            continue
        s = sizes.setdefault((nbytes, place), {k: [] for _, k in STEPS})
        posts = [v[0] for v in g.values()]
        s["spread"].append(max(posts) - min(posts))
        for posted, completed, (_, _, _, la, pi, rd, dn, se) in g.values():
            s["launch"].append(la - posted)
            s["pick"].append(pi - la)
            s["ready"].append(max(rd - pi, 0))  # in before its pick-up
            s["done"].append(dn - rd)
            s["seen"].append(se - dn)
            s["end"].append(completed - se)
        s["critical"].append(max(v[1] for v in g.values()) - max(posts))
        s["reported"].append(max(v[1] - v[0] for v in g.values()))
    if not sizes:
        print(f"op-breakdown: {d}: no operation matched on every rank",
              file=sys.stderr)
        return 1
    print(f"# {d}: {len(ranks)} nodes, one trainer each; "
          f"{unmatched} trainer operations not matched")
    for (nbytes, place), s in sorted(sizes.items()):
        n = len(s["reported"])
        print(f"\n{nbytes} bytes, {place} of place, {n} operations "
              f"(per-rank steps over all {len(ranks)} ranks):")
        print(f"  {'step':50s} {'p50 (us)':>10s} {'p90 (us)':>10s}")
        for name, k in STEPS:
            print(f"  {name:50s} {pct(s[k], 0.5) / 1e3:10.1f} "
                  f"{pct(s[k], 0.9) / 1e3:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
