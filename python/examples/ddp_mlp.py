# SPDX-License-Identifier: MIT
"""DDP training of an MLP on generated data, over collstack and over gloo
in the same processes, from the same seed (scripts/torch-ddp.sh starts it
with torchrun's variables on every node).

The default process group is collstack; gloo is a second group over the
same ranks. Each backend trains its own copy of the model for --steps
steps (same initial weights, same batches); then rank 0 compares the two
copies' parameters and prints

  ddp ok backend=collstack steps=N max_param_diff_vs_gloo=X
      step_ms_collstack=A step_ms_gloo=B

X = max |p_collstack - p_gloo| / max |p_gloo| over all parameters (they
must agree to 1e-5 relative; the two sum the gradients in different
orders). A and B: median wall time of a training step (forward, backward
with DDP's allreduces, optimizer), the slowest rank's, after --warmup
steps. A third run without DDP (each rank trains alone, all at once)
gives the floor of a step on this machine, printed as

  ddp floor step_ms_compute=C: ... collstack/gloo A/B, compute/gloo C/B

(no backend's step can be shorter than C here). Every rank also checks its parameters are bit-identical to rank
0's within each backend. Exit 1 (and 'ddp FAIL ...') otherwise.
"""

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist

import collstack.torch  # noqa: F401  (registers the backend)


def make_model(seed, width):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(64, width), torch.nn.ReLU(),
        torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, 10))


def train(group, args, rank, local=False):
    """DDP over @group; with @local no DDP at all (each rank trains its own
    copy, no gradient exchange: the compute-only floor of a step), @group
    then only times the steps."""
    model = make_model(args.seed, args.width)
    ddp = model if local else torch.nn.parallel.DistributedDataParallel(
        model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    w_true = torch.randn(64, 10, generator=torch.Generator().manual_seed(
        args.seed))
    times = []
    for step in range(args.steps + args.warmup):
        x = torch.randn(args.batch, 64, generator=gen)
        y = (x @ w_true).argmax(1)
        dist.barrier(group=group)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        if step >= args.warmup:
            times.append(t.item() * 1e3)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return flat, statistics.median(times), loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("collstack")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    p_cs, ms_cs, loss_cs = train(None, args, rank)
    p_gl, ms_gl, loss_gl = train(gloo, args, rank)
    _, ms_local, _ = train(gloo, args, rank, local=True)
    # every rank's parameters, per backend, gathered over gloo
    bad = []
    for name, p in (("collstack", p_cs), ("gloo", p_gl)):
        allp = [torch.empty_like(p) for _ in range(size)]
        dist.all_gather(allp, p, group=gloo)
        for r, q in enumerate(allp):
            if not torch.equal(q, allp[0]):
                bad.append(f"{name}: rank {r}'s parameters differ from "
                           "rank 0's")
    diff = ((p_cs - p_gl).abs().max() / p_gl.abs().max()).item()
    if diff > 1e-5:
        bad.append(f"max_param_diff_vs_gloo={diff:.3g} > 1e-5")
    if rank == 0:
        if bad:
            print("ddp FAIL " + "; ".join(bad))
        else:
            print(f"ddp ok backend=collstack steps={args.steps} "
                  f"max_param_diff_vs_gloo={diff:.3g} "
                  f"step_ms_collstack={ms_cs:.2f} step_ms_gloo={ms_gl:.2f}"
                  f"  (ranks={size} params={p_cs.numel()} loss "
                  f"{loss_cs:.4f}/{loss_gl:.4f})")
            print(f"ddp floor step_ms_compute={ms_local:.2f}: the same "
                  f"steps without any gradient exchange (every rank "
                  f"training alone, at once); no backend's step here can "
                  f"be shorter: collstack/gloo {ms_cs / ms_gl:.2f}, "
                  f"compute/gloo {ms_local / ms_gl:.2f}")
        sys.stdout.flush()
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
