# SPDX-License-Identifier: MIT
"""The "ps" strategy against allreduce, on every rank of a launched job.

Two parameter groups carry the same gradients each step: "ref" always
through allreduce, "emb" through the strategy of the step (allreduce, then
ps, rs-ag, ps again: the table is destroyed and made anew). Gradients are
small integers (sums exact in any order) with most rows of 64 all zero,
as an embedding's are; every step "emb" must equal "ref" element by
element; so must a 100-element exchange on the same group each step. A
group that grows from 10 to 300 elements gets a bigger table and the
right sums. A third group on the "alltoall" strategy (two cs_alltoall)
must equal allreduce too. Then f64 through ps must be refused with its
reason.

Prints "strat_ps ok rank=R steps=N ps_steps=P" or "strat_ps FAIL ...".
"""

import sys

import numpy as np

import collstack
from collstack.strategy import Job, StrategyError

N = 64 * 37 + 5         # not a whole number of 64-value rows
STEPS = 12
PLAN = {3: "ps", 6: "rs-ag", 8: "ps"}   # step -> strategy asked for


def grad(rank, step):
    rng = np.random.default_rng(1000 * step + rank)
    g = np.zeros(N, np.float32)
    for row in rng.choice((N + 63) // 64, 5, replace=False):
        g[row * 64:(row + 1) * 64] = rng.integers(-50, 50, 64)[:len(
            g[row * 64:(row + 1) * 64])]
    return g


def main():
    bad = []
    with collstack.Client() as c:
        g = c.join("stratps")
        rank = g.rank
        buf = c.buffer(3 * N, "f32")
        view = buf.numpy()
        job = Job(c, g)
        job.add("ref", "allreduce")
        job.add("emb", "allreduce")
        job.add("a2a", "alltoall")
        ps_steps = 0
        for step in range(STEPS):
            if rank == (step % g.size) and step in PLAN:
                job.request("emb", PLAN[step])
            job.step(step)
            want = PLAN.get(max([s for s in PLAN if s <= step],
                                default=-1), "allreduce")
            if job.current("emb") != want:
                bad.append(f"step {step}: emb on {job.current('emb')}, "
                           f"{want} asked")
            ps_steps += job.current("emb") == "ps"
            view[:N] = grad(rank, step)
            view[N:2 * N] = view[:N]
            view[2 * N:] = view[:N]
            job.exchange("ref", buf, N, 0)
            job.exchange("emb", buf, N, N)
            job.exchange("a2a", buf, N, 2 * N)
            if (view[:N] != view[2 * N:]).any():
                bad.append(f"step {step}: the alltoall strategy differs")
            diff = np.nonzero(view[:N] != view[N:2 * N])[0]
            if len(diff):
                bad.append(f"step {step} ({job.current('emb')}): "
                           f"{len(diff)} elements differ, first "
                           f"[{diff[0]}] {view[N + diff[0]]} != "
                           f"{view[diff[0]]}")
            if not view[:N].any():
                bad.append(f"step {step}: the sum is all zero")
            # a shorter exchange on the same group (the first rows)
            view[:100] = grad(rank, step + 100)[:100] + rank + 1
            view[N:N + 100] = view[:100]
            job.exchange("ref", buf, 100, 0)
            job.exchange("emb", buf, 100, N)
            if (view[:100] != view[N:N + 100]).any():
                bad.append(f"step {step}: 100-element exchange differs")
        job.close()
        # a group that grows: 10 elements, then 300 (a new, bigger table)
        job = Job(c, g)
        job.add("grow", "ps")
        want = g.size * (g.size + 1) / 2
        for n in (10, 300, 300, 10):
            view[:n] = rank + 1
            job.exchange("grow", buf, n, 0)
            if (view[:n] != want).any():
                bad.append(f"grow: {n} elements: {view[:n][:4]} != {want}")
        job.close()
        # f64 is refused with its reason (the table sums in f32)
        job = Job(c, g)
        job.add("d", "ps")
        b64 = c.buffer(16, "f64")
        try:
            job.exchange("d", b64)
            bad.append("f64 through ps was not refused")
        except StrategyError as e:
            if "f64 is not offered" not in str(e):
                bad.append(f"f64 refused with '{e}'")
        job.close()
    if bad:
        print(f"strat_ps FAIL rank={rank}: " + "; ".join(bad))
        return 1
    print(f"strat_ps ok rank={rank} steps={STEPS} ps_steps={ps_steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
