# SPDX-License-Identifier: MIT
"""torch.distributed.all_reduce over the collstack backend: time per size,
the slowest rank's, for a tensor in a collstack shared segment (zero copy)
and for an ordinary tensor (copied in and out once). Rank 0 prints

  torch allreduce bytes=B place=shared|copied p50_us=T busbw_GBps=X

busbw = 2(n-1)/n x bytes / time (the convention of collstack bench).
Launch with torchrun's variables beside the sidecars
(scripts/torch-ddp.sh --bench).
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import collstack.torch as ct


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, nargs="+", default=[64 << 20])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("collstack")
    rank, n = dist.get_rank(), dist.get_world_size()
    for nbytes in args.bytes:
        count = nbytes // 4
        for place in ("shared", "copied"):
            t = ct.empty(count) if place == "shared" else torch.empty(count)
            times = []
            for i in range(args.warmup + args.iters):
                t.fill_(1.0)
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                dt = torch.tensor([time.perf_counter() - t0],
                                  dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)
                if i >= args.warmup:
                    times.append(dt.item())
            if not bool((t == float(n)).all()):
                raise SystemExit(f"rank {rank}: wrong result at {nbytes}")
            p50 = statistics.median(times)
            if rank == 0:
                bw = 2 * (n - 1) / n * nbytes / p50 / 1e9
                print(f"torch allreduce bytes={nbytes} place={place} "
                      f"p50_us={p50 * 1e6:.0f} busbw_GBps={bw:.3f}",
                      flush=True)
            del t
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
