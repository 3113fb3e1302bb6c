# SPDX-License-Identifier: MIT
"""Every op of the collstack backend against gloo's result on the same
inputs (and against the expected value, which every rank can compute: the
inputs are generated from seeds). Run by run_ranks.py (N ranks, one
sidecar). Exit 0 when every case agreed, 1 otherwise.

dtypes float32, float16, bfloat16, int64 (and float64, int32, uint8 for
the reductions' dtype table); ops sum, product, min, max, avg. Reduction
inputs are small integers (products of +-1/+-2), exact in every dtype, so
every result must be bit-identical whatever the reduction order; float32
gets a random-normal case too, compared with rtol 1e-5.
"""

import os
import sys
import traceback

import torch
import torch.distributed as dist

import collstack.torch as ct

R = dist.ReduceOp
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64]
OPS = {"sum": R.SUM, "product": R.PRODUCT, "min": R.MIN, "max": R.MAX}
failures = []
counts = {"cases": 0, "gloo_compared": 0, "gloo_unsupported": 0}


def gen(rank, case, n, dtype, kind="sum"):
    g = torch.Generator().manual_seed(1000 * rank + case)
    if kind == "product":
        v = torch.tensor([-2, -1, 1, 2])[torch.randint(0, 4, (n,),
                                                       generator=g)]
    else:
        v = torch.randint(-8, 9, (n,), generator=g)
    return v.to(dtype)


def reduce_ref(xs, kind):
    acc = xs[0].clone().double() if xs[0].is_floating_point() else \
        xs[0].clone()
    for x in xs[1:]:
        x = x.double() if x.is_floating_point() else x
        if kind == "sum":
            acc = acc + x
        elif kind == "product":
            acc = acc * x
        elif kind == "min":
            acc = torch.minimum(acc, x)
        else:
            acc = torch.maximum(acc, x)
    return acc.to(xs[0].dtype)


def check(name, got, want):
    counts["cases"] += 1
    if got.dtype != want.dtype or not torch.equal(got, want):
        failures.append(f"{name}: got {got.flatten()[:6].tolist()} want "
                        f"{want.flatten()[:6].tolist()}")


def with_gloo(name, fn):
    """fn(group) -> tensor or list; returns its result over gloo, or None
    where gloo refuses the dtype/op."""
    try:
        return fn(GLOO)
    except RuntimeError as e:
        counts["gloo_unsupported"] += 1
        if RANK == 0 and os.environ.get("CS_TORCH_VERBOSE"):
            print(f"  gloo cannot {name}: {str(e).splitlines()[0]}")
        return None


def both(name, fn, want=None):
    """Run fn over collstack and gloo; compare with each other and want."""
    got = fn(None)
    ref = with_gloo(name, fn)
    if not isinstance(got, (list, tuple)):
        got, ref = [got], None if ref is None else [ref]
        want = None if want is None else [want]
    for i, g in enumerate(got):
        if ref is not None:
            counts["gloo_compared"] += 1
            check(f"{name}[{i}] vs gloo", g, ref[i])
        if want is not None:
            check(f"{name}[{i}] vs expected", g, want[i])


def reductions(n, size, case0):
    case = case0
    for dt in DTYPES:
        for kind, op in OPS.items():
            case += 1
            c = case
            xs = [gen(r, c, n * size, dt, kind) for r in range(size)]
            want = reduce_ref(xs, kind)
            tag = f"{dt} {kind} n={n}"

            def ar(g, c=c, dt=dt, op=op, kind=kind):
                t = gen(RANK, c, n * size, dt, kind)
                dist.all_reduce(t, op=op, group=g)
                return t
            both(f"all_reduce {tag}", ar, want)

            def ar_zc(g, c=c, dt=dt, op=op, kind=kind):
                t = ct.shared(gen(RANK, c, n * size, dt, kind))
                dist.all_reduce(t, op=op, group=g)
                return t
            both(f"all_reduce shared {tag}", ar_zc, want)

            def red(g, c=c, dt=dt, op=op, kind=kind):
                t = gen(RANK, c, n * size, dt, kind)
                dist.reduce(t, dst=size - 1, op=op, group=g)
                return t if RANK == size - 1 else want
            both(f"reduce {tag}", red, want)

            # a shared tensor (zero copy), a count no multiple of the size,
            # to rank 0 (cs_reduce's reduce-scatter plus tail when large)
            m = n * size - 1

            def red_zc(g, c=c, dt=dt, op=op, kind=kind, m=m):
                t = ct.shared(gen(RANK, c, n * size, dt, kind)[:m].clone())
                dist.reduce(t, dst=0, op=op, group=g)
                return t if RANK == 0 else want[:m]
            both(f"reduce shared uneven {tag}", red_zc, want[:m])

            blocks = list(want.chunk(size))

            def rs(g, c=c, dt=dt, op=op, kind=kind):
                x = gen(RANK, c, n * size, dt, kind)
                out = torch.empty(n, dtype=dt)
                dist.reduce_scatter(out, list(x.chunk(size)), op=op, group=g)
                return out
            both(f"reduce_scatter {tag}", rs, blocks[RANK])

            def rsb(g, c=c, dt=dt, op=op, kind=kind):
                x = gen(RANK, c, n * size, dt, kind)
                out = torch.empty(n, dtype=dt)
                dist.reduce_scatter_tensor(out, x, op=op, group=g)
                return out
            both(f"_reduce_scatter_base {tag}", rsb, blocks[RANK])

            def rsb_zc(g, c=c, dt=dt, op=op, kind=kind):
                x = ct.shared(gen(RANK, c, n * size, dt, kind))
                out = ct.empty(n, dtype=dt)
                dist.reduce_scatter_tensor(out, x, op=op, group=g)
                return out
            both(f"_reduce_scatter_base shared {tag}", rsb_zc, blocks[RANK])
    # float32, random normal: rtol 1e-5 against gloo
    g = torch.Generator().manual_seed(77 + RANK)
    x = torch.randn(4099, generator=g)
    a, b = x.clone(), x.clone()
    dist.all_reduce(a)
    dist.all_reduce(b, group=GLOO)
    counts["cases"] += 1
    counts["gloo_compared"] += 1
    if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
        failures.append(f"random float32 allreduce: max diff "
                        f"{(a - b).abs().max().item()}")
    # AVG (gloo has none): sum / size
    for dt in (torch.float32, torch.bfloat16):
        xs = [gen(r, 9000, 64, dt) for r in range(size)]
        t = gen(RANK, 9000, 64, dt)
        dist.all_reduce(t, op=R.AVG)
        check(f"all_reduce avg {dt}", t,
              (reduce_ref(xs, "sum").double() / size).to(dt))
    return case


def movement(n, size):
    dts = DTYPES + [torch.bool, torch.int8, torch.float64]
    for i, dt in enumerate(dts):
        c = 500 + 10 * i
        xs = [gen(r, c, n, torch.int64).to(dt) for r in range(size)]
        tag = f"{dt} n={n}"
        root = (i + 1) % size

        def bc(g, c=c, dt=dt, root=root):
            t = gen(RANK, c, n, torch.int64).to(dt)
            dist.broadcast(t, src=root, group=g)
            return t
        both(f"broadcast root={root} {tag}", bc, xs[root])

        def ag(g, c=c, dt=dt):
            out = [torch.empty(n, dtype=dt) for _ in range(size)]
            dist.all_gather(out, gen(RANK, c, n, torch.int64).to(dt),
                            group=g)
            return out
        both(f"all_gather {tag}", ag, xs)

        def agb(g, c=c, dt=dt):
            out = torch.empty(n * size, dtype=dt)
            dist.all_gather_into_tensor(out, gen(RANK, c, n, torch.int64).to(dt),
                                  group=g)
            return out
        both(f"_all_gather_base {tag}", agb, torch.cat(xs))

        def agb_zc(g, c=c, dt=dt):
            out = ct.empty(n * size, dtype=dt)
            inp = ct.shared(gen(RANK, c, n, torch.int64).to(dt))
            dist.all_gather_into_tensor(out, inp, group=g)
            return out
        both(f"_all_gather_base shared {tag}", agb_zc, torch.cat(xs))

        def ga(g, c=c, dt=dt, root=root):
            out = [torch.empty(n, dtype=dt) for _ in range(size)] \
                if RANK == root else None
            dist.gather(gen(RANK, c, n, torch.int64).to(dt), out, dst=root,
                        group=g)
            return out if RANK == root else xs
        both(f"gather root={root} {tag}", ga, xs)

        def sc(g, c=c, dt=dt, root=root):
            out = torch.empty(n, dtype=dt)
            dist.scatter(out, xs if RANK == root else None, src=root,
                         group=g)
            return out
        both(f"scatter root={root} {tag}", sc, xs[RANK])

        # all-to-all, even: rank r's block j is xs_j... built per rank
        def a2a(g, c=c, dt=dt):
            inp = torch.cat([gen(RANK * 100 + j, c, n, torch.int64).to(dt)
                             for j in range(size)])
            out = torch.empty(n * size, dtype=dt)
            dist.all_to_all_single(out, inp, group=g)
            return out
        want = torch.cat([gen(j * 100 + RANK, c, n, torch.int64).to(dt)
                          for j in range(size)])
        both(f"all_to_all_single even {tag}", a2a, want)

        # uneven splits: rank r sends (r + j) % 3 + j rows of 2 to rank j
        def splits(r, j):
            return (r + j) % 3 + j

        def a2av(g, c=c, dt=dt):
            ins = [splits(RANK, j) for j in range(size)]
            outs = [splits(j, RANK) for j in range(size)]
            inp = torch.cat([gen(RANK * 100 + j, c, 2 * ins[j],
                                 torch.int64).to(dt).view(-1, 2)
                             for j in range(size)])
            out = torch.empty(sum(outs), 2, dtype=dt)
            dist.all_to_all_single(out, inp, outs, ins, group=g)
            return out
        want = torch.cat([gen(j * 100 + RANK, c, 2 * splits(j, RANK),
                              torch.int64).to(dt).view(-1, 2)
                          for j in range(size)])
        both(f"all_to_all_single uneven {tag}", a2av, want)

        def a2al(g, c=c, dt=dt):
            ins = [gen(RANK * 100 + j, c, splits(RANK, j),
                       torch.int64).to(dt) for j in range(size)]
            outs = [torch.empty(splits(j, RANK), dtype=dt)
                    for j in range(size)]
            dist.all_to_all(outs, ins, group=g)
            return outs
        wl = [gen(j * 100 + RANK, c, splits(j, RANK), torch.int64).to(dt)
              for j in range(size)]
        both(f"all_to_all list uneven {tag}", a2al, wl)

        # send/recv around the ring (ranks share one node here)
        def p2p(g, c=c, dt=dt):
            nxt, prv = (RANK + 1) % size, (RANK - 1) % size
            out = torch.empty(n, dtype=dt)
            s = dist.isend(gen(RANK, c, n, torch.int64).to(dt), nxt, group=g)
            r = dist.irecv(out, prv, group=g)
            s.wait()
            r.wait()
            return out
        both(f"send/recv ring {tag}", p2p, xs[(RANK - 1) % size])

        # tags: two messages to the next rank, received in the other order
        def p2p_tags(g, c=c, dt=dt):
            nxt, prv = (RANK + 1) % size, (RANK - 1) % size
            a, b = torch.empty(n, dtype=dt), torch.empty(n, dtype=dt)
            rb = dist.irecv(b, prv, group=g, tag=5)
            ra = dist.irecv(a, prv, group=g, tag=3)
            s3 = dist.isend(gen(RANK, c, n, torch.int64).to(dt), nxt,
                            group=g, tag=3)
            s5 = dist.isend(gen(RANK + 7, c, n, torch.int64).to(dt), nxt,
                            group=g, tag=5)
            for w in (s3, s5, ra, rb):
                w.wait()
            return torch.cat([a, b])
        both(f"send/recv tags {tag}", p2p_tags,
             torch.cat([xs[(RANK - 1) % size],
                        gen((RANK - 1) % size + 7, c, n,
                            torch.int64).to(dt)]))


def expect_error(name, fn, *words):
    counts["cases"] += 1
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        if not all(w in msg for w in words):
            failures.append(f"{name}: error {msg!r} lacks {words}")
        return
    failures.append(f"{name}: no error")


def errors():
    t = torch.ones(4)
    expect_error("BAND", lambda: dist.all_reduce(t, op=R.BAND),
                 "collstack: allreduce", "not supported")
    expect_error("int AVG", lambda: dist.all_reduce(
        torch.ones(4, dtype=torch.int64), op=R.AVG), "allreduce", "AVG")
    expect_error("bool sum", lambda: dist.all_reduce(
        torch.ones(4, dtype=torch.bool)), "allreduce", "dtype")
    expect_error("send to itself", lambda: dist.send(t, RANK), "send",
                 "bad peer rank")
    expect_error("recv any", lambda: dist.recv(t), "recv_anysource")
    expect_error("uneven all_gather", lambda: dist.all_gather(
        [torch.ones(3) for _ in range(SIZE)], torch.ones(4)),
        "allgather", "uneven")
    expect_error("monitored_barrier", lambda: dist.monitored_barrier(),
                 "monitored_barrier")


def ddp_smoke():
    torch.manual_seed(5)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 1))
    d = torch.nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.SGD(d.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(RANK)
    for _ in range(5):
        x = torch.randn(8, 16, generator=g)
        opt.zero_grad()
        d(x).pow(2).mean().backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in m.parameters()])
    allp = [torch.empty_like(flat) for _ in range(SIZE)]
    dist.all_gather(allp, flat, group=GLOO)
    counts["cases"] += 1
    if not all(torch.equal(allp[0], p) for p in allp):
        failures.append("DDP: parameters differ between ranks")


def main():
    global RANK, SIZE, GLOO
    dist.init_process_group("collstack")
    RANK, SIZE = dist.get_rank(), dist.get_world_size()
    GLOO = dist.new_group(backend="gloo")
    assert dist.get_backend() == "collstack", dist.get_backend()
    try:
        case = reductions(5, SIZE, 0)
        reductions(1000, SIZE, case)        # past the direct-exchange size
        movement(7, SIZE)
        movement(3000, SIZE)
        errors()
        ddp_smoke()
        dist.barrier()
    except Exception:  # noqa: BLE001
        failures.append(traceback.format_exc())
    for f in failures[:20]:
        print(f"rank {RANK}: FAIL {f}")
    print(f"rank {RANK}: torch {torch.__version__}: {counts['cases']} "
          f"checks, {counts['gloo_compared']} against gloo "
          f"({counts['gloo_unsupported']} cases gloo cannot do), "
          f"{len(failures)} failed")
    sys.stdout.flush()
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
