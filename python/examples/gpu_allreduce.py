# SPDX-License-Identifier: MIT
"""One trainer of scripts/gpu-check.sh: allreduce GPU tensors through the
Python binding, verified element by element.

    COLLSTACK_SOCKET=... COLLSTACK_LIB=... python3 gpu_allreduce.py RANK SIZE

PyTorch float32 (__cuda_array_interface__) and bfloat16 (DLPack), and a
CuPy float32 array, each where the module is installed. Exit 77 where
neither is, or there is no GPU."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import collstack  # noqa: E402


def main():
    rank, size = int(sys.argv[1]), int(sys.argv[2])
    n = 1 << 20
    want = size * (size + 1) // 2
    done = []
    c = collstack.Client()
    g = c.join("py-gpu", rank, size, 0, 1)
    try:
        import torch
        if torch.cuda.is_available():
            for dt in (torch.float32, torch.bfloat16):
                x = torch.arange(n, device="cuda", dtype=torch.float32)
                x = ((x % 7) * (rank + 1)).to(dt)
                g.allreduce(x).wait()
                ref = ((torch.arange(n, device="cuda") % 7) * want).to(dt)
                bad = int((x != ref).sum())
                print(f"python rank {rank}: torch {dt} {n} elements, "
                      f"{bad} wrong", flush=True)
                if bad:
                    return 1
                done.append(str(dt))
    except ImportError:
        pass
    try:
        import cupy
        x = (cupy.arange(n, dtype=cupy.float32) % 5) * (rank + 1)
        g.allreduce(x).wait()
        bad = int((x != (cupy.arange(n, dtype=cupy.float32) % 5) * want)
                  .sum())
        print(f"python rank {rank}: cupy float32 {n} elements, {bad} wrong",
              flush=True)
        if bad:
            return 1
        done.append("cupy")
    except ImportError:
        pass
    c.close()
    return 0 if done else 77


if __name__ == "__main__":
    sys.exit(main())
