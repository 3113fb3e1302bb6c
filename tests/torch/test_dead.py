# SPDX-License-Identifier: MIT
"""A rank that dies mid-step: the others get an error, not a hang.

Run by run_ranks.py with 3 ranks. The last rank kills itself (SIGKILL)
in step 3; the survivors' next collective (mode ops: an all_reduce; mode
ddp: DDP's gradient allreduce inside backward()) must raise an error that
names the operation within 120 s. Exit 0 then.
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import collstack.torch  # noqa: F401

MODE = sys.argv[1]


def main():
    dist.init_process_group("collstack")
    rank, size = dist.get_rank(), dist.get_world_size()
    victim = size - 1
    m = torch.nn.Linear(256, 256)
    ddp = torch.nn.parallel.DistributedDataParallel(m) \
        if MODE == "ddp" else None
    t = torch.ones(1 << 16)
    for step in range(6):
        if step == 3 and rank == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        if os.environ.get("CS_TORCH_VERBOSE"):
            print(f"rank {rank} step {step}", flush=True)
        try:
            if MODE == "ddp":
                ddp(torch.randn(8, 256)).sum().backward()
            else:
                w = dist.all_reduce(t, async_op=True)
                w.wait(datetime.timedelta(seconds=120))
        except Exception as e:  # noqa: BLE001
            dt = time.monotonic() - t0
            msg = str(e)
            ok = step == 3 and "allreduce" in msg
            print(f"rank {rank}: {'ok' if ok else 'FAIL'}: step {step} "
                  f"failed after {dt:.2f} s: {msg.splitlines()[0][:300]}")
            sys.stdout.flush()
            os._exit(0 if ok else 1)
    print(f"rank {rank}: FAIL: no error after rank {victim} died")
    sys.stdout.flush()
    os._exit(1)


if __name__ == "__main__":
    main()
