# SPDX-License-Identifier: MIT
"""One rank of scripts/gpu-check.sh's torch step: torch.distributed over
the collstack backend with CUDA tensors (docs/torch.md, "CUDA tensors"),
every result checked element by element.

    COLLSTACK_SOCKET=... COLLSTACK_LIB=... MASTER_ADDR=127.0.0.1 \\
        MASTER_PORT=P python3 gpu_torch.py RANK SIZE

allreduce (f32, bf16, AVG), broadcast, all-gather into one tensor,
reduce-scatter, a non-contiguous tensor (staged), the same bucket reused
over steps (registered once), and a few DDP steps of a small MLP whose
parameters must agree on every rank. Exit 77 without torch or a GPU."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main():
    rank, size = int(sys.argv[1]), int(sys.argv[2])
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return 77
    if not torch.cuda.is_available():
        return 77
    import collstack.torch as ct
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size),
                      LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    dist.init_process_group("collstack")
    dev = torch.device("cuda", 0)
    bad = 0

    def expect(name, got, want):
        nonlocal bad
        wrong = int((got != want).sum())
        print(f"torch rank {rank}: {name}: {got.numel()} elements, "
              f"{wrong} wrong", flush=True)
        bad += wrong != 0

    n = 1 << 20
    tri = size * (size + 1) // 2
    base = torch.arange(n, device=dev) % 7
    for dt in (torch.float32, torch.bfloat16):
        x = (base * (rank + 1)).to(dt)
        dist.all_reduce(x)
        expect(f"all_reduce {dt}", x, (base * tri).to(dt))
    x = (base * (rank + 1)).float()
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    expect("all_reduce avg", x, (base * tri).float() / size)
    x = base.float() * (rank + 1)
    dist.broadcast(x, src=size - 1)
    expect("broadcast", x, base.float() * size)
    out = torch.empty(size * 4096, device=dev)
    dist.all_gather_into_tensor(out, torch.full((4096,), float(rank),
                                                device=dev)) \
        if hasattr(dist, "all_gather_into_tensor") else \
        dist._all_gather_base(out, torch.full((4096,), float(rank),
                                              device=dev))
    expect("all_gather", out,
           torch.arange(size, device=dev).float().repeat_interleave(4096))
    src = torch.arange(size * 4096, device=dev).float()
    dst = torch.empty(4096, device=dev)
    rs = getattr(dist, "reduce_scatter_tensor", None) or \
        dist._reduce_scatter_base
    rs(dst, src)
    expect("reduce_scatter", dst, src[rank * 4096:(rank + 1) * 4096] * size)
    m = torch.arange(64 * 64, device=dev).float().view(64, 64).t()
    dist.all_reduce(m)                   # non-contiguous: staged
    expect("all_reduce transposed", m,
           torch.arange(64 * 64, device=dev).float().view(64, 64).t() *
           size)
    regs = ct._runtime().dev.registered
    bucket = torch.zeros(n, device=dev)
    for step in range(5):
        bucket.fill_(step + rank)
        dist.all_reduce(bucket)
        expect(f"bucket step {step}", bucket,
               torch.full((n,), float(step * size + tri - size),
                          device=dev))
    again = ct._runtime().dev.registered - regs
    print(f"torch rank {rank}: one bucket over 5 steps: {again} "
          "registration(s)", flush=True)
    bad += again != 1

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 16)).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator(device=dev).manual_seed(1000 + rank)
    for _ in range(5):
        xb = torch.randn(64, 256, device=dev, generator=g)
        loss = ddp(xb).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    diff = float((flat - ref).abs().max())
    print(f"torch rank {rank}: ddp 5 steps, max param diff vs rank 0 "
          f"{diff:.3g}", flush=True)
    bad += diff != 0.0
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
