# SPDX-License-Identifier: MIT
"""Pipeline-parallel traffic over torch.distributed's "collstack" backend:
every rank is a stage; micro-batch activations go forward rank r -> r + 1
and gradients back r + 1 -> r with dist.isend/irecv (cs_send/cs_recv, on
one node or across nodes), several micro-batches in flight, tags per
micro-batch. Each value is a function of (stage, micro-batch, index), so
every element is checked. Launched with the torchrun variables and
MASTER_ADDR/MASTER_PORT (tests/netns/test_p2p.sh p2p_4x2). Prints
"pipeline ok rank R micro=M elems=N" or raises.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "python"))
import collstack.torch  # noqa: E402,F401  (registers the backend)

MICRO, N = 6, 100003


def act(stage, m):
    i = torch.arange(N, dtype=torch.float64)
    return torch.sin(i * 0.001 + stage * 1.7 + m * 0.3).float()


def main():
    dist.init_process_group("collstack")
    r, n = dist.get_rank(), dist.get_world_size()
    works, ins, grads = [], {}, {}
    # forward: receive from r - 1 (stage 0 makes its own), send to r + 1
    for m in range(MICRO):
        if r > 0:
            ins[m] = torch.empty(N)
            works.append(dist.irecv(ins[m], r - 1, tag=m))
        if r < n - 1:
            works.append(dist.isend(act(r, m), r + 1, tag=m))
    # backward: gradients from r + 1, to r - 1 (tags after the forward's)
    for m in range(MICRO):
        if r < n - 1:
            grads[m] = torch.empty(N, dtype=torch.float64)
            works.append(dist.irecv(grads[m], r + 1, tag=1000 + m))
        if r > 0:
            works.append(dist.isend(act(r, m).double() * 2, r - 1,
                                    tag=1000 + m))
    for w in works:
        w.wait()
    for m in range(MICRO):
        if r > 0 and not torch.equal(ins[m], act(r - 1, m)):
            raise SystemExit(f"rank {r}: micro-batch {m} forward wrong")
        if r < n - 1 and not torch.equal(grads[m],
                                         act(r + 1, m).double() * 2):
            raise SystemExit(f"rank {r}: micro-batch {m} backward wrong")
    dist.barrier()
    # groups over some of the nodes (the first and the second half of the
    # ranks: nodes 0..k-1 and k..2k-1 with node-consecutive ranks), each
    # running beside the other on its own ring; every rank sums its half
    halves = [dist.new_group(ranks=list(range(h * n // 2, (h + 1) * n // 2)))
              for h in range(2)] if n >= 4 else []
    for h, g in enumerate(halves):
        if h == (2 * r) // n:
            t = torch.full((1000,), float(r + 1))
            dist.all_reduce(t, group=g)
            lo, hi = h * n // 2, (h + 1) * n // 2
            want = float(sum(q + 1 for q in range(lo, hi)))
            if not torch.equal(t, torch.full((1000,), want)):
                raise SystemExit(f"rank {r}: half {h} allreduce wrong: "
                                 f"{t[0].item()} != {want}")
    dist.barrier()
    # one write: the ranks share the launcher's pipe
    sys.stdout.write(f"pipeline ok rank {r} micro={MICRO} elems={N} "
                     f"half_groups={len(halves)}\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
