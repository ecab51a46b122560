"""One rank of `geotrain clusters check`: a short burn-in of this rank's device and an all-reduce of
the size the presets send, with the group the check starts (a FileStore in a private directory, as a
local workspace meets: recipes.private_store; gloo on CPU, NCCL where CUDA is).

    GEOTRAIN_GROUP_STORE=/private/dir/store RANK=0 WORLD_SIZE=2 \\
        python -m recipes.cluster_check --seconds 2 --payload-bytes 16138884

Prints one line, `geotrain-check {json}`: the device, its matmul throughput (FLOP/s), a memory test
where a GPU is (a pattern written and read back), and the all-reduce's time and bus bandwidth
(nccl-tests' convention, doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from recipes.private_store import GROUP_STORE_ENV, open_file_store

PREFIX = "geotrain-check "


def matmul_rate(device: torch.device, seconds: float) -> dict:
    """Square matmuls for about `seconds`: FLOP/s (2 n^3 per product), bf16 on a GPU, fp32 on CPU."""
    cuda = device.type == "cuda"
    n, dtype = (8192, torch.bfloat16) if cuda else (512, torch.float32)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    torch.matmul(a, b)  # warm-up (kernels chosen, caches filled)
    if cuda:
        torch.cuda.synchronize(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.matmul(a, b)
        count += 1
        if cuda and count % 8 == 0:
            torch.cuda.synchronize(device)
    if cuda:
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "products": count,
            "flops": 2 * n ** 3 * count / elapsed}


def memory_test(device: torch.device, limit_bytes: int = 8 << 30) -> dict:
    """Write a 251-byte pattern over a quarter of the free GPU memory (at most `limit_bytes`) and read
    it back (the comparison's mask takes as much again)."""
    if device.type != "cuda":
        return {"tested_bytes": 0, "errors": 0, "note": "no GPU: not tested"}
    free, _ = torch.cuda.mem_get_info(device)
    rows = int(min(free // 4, limit_bytes)) // 251
    pattern = torch.arange(251, device=device, dtype=torch.uint8)
    block = pattern.repeat(rows, 1)
    torch.cuda.synchronize(device)
    errors = int((block != pattern).sum().item())
    del block
    torch.cuda.empty_cache()
    return {"tested_bytes": rows * 251, "errors": errors}


def all_reduce(payload_bytes: int, device: torch.device, iterations: int) -> dict:
    world = dist.get_world_size()
    tensor = torch.ones(max(1, payload_bytes // 4), device=device)
    dist.all_reduce(tensor)  # warm-up: connections made
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / iterations
    algbw = tensor.numel() * 4 / seconds
    return {"bytes": tensor.numel() * 4, "seconds": seconds, "algbw": algbw,
            "busbw": algbw * 2 * (world - 1) / world if world > 1 else algbw, "world": world,
            "backend": dist.get_backend()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--payload-bytes", type=int, default=16 << 20)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank)) % torch.cuda.device_count()}"
                          if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    result = {"rank": rank, "device": name, "matmul": matmul_rate(device, args.seconds),
              "memory": memory_test(device)}
    store = open_file_store(os.environ[GROUP_STORE_ENV], timedelta(seconds=120))
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    try:
        result["all_reduce"] = all_reduce(args.payload_bytes, device, args.iterations)
    finally:
        dist.destroy_process_group()
    print(PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
