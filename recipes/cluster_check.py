"""One rank of `geotrain clusters check`: a short burn-in of this rank's device and an all-reduce of
the size the presets send, with the group the check starts (a FileStore in a private directory, as a
local workspace meets: recipes.private_store; gloo on CPU, NCCL where CUDA is).

    GEOTRAIN_GROUP_STORE=/private/dir/store RANK=0 WORLD_SIZE=2 \\
        python -m recipes.cluster_check --seconds 2 --payload-bytes 16138884

Prints one line, `geotrain-check {json}`: the device, its matmul throughput (FLOP/s), a memory test
where a GPU is (a pattern written and read back), and the all-reduce's time and bus bandwidth
(nccl-tests' convention, doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce).

Two more ways, for a cluster's nodes (core/bootstrap/check_over_ssh.py, core/kubernetes/check_job.py):

    python -m recipes.cluster_check --devices --seconds 2          # burn-in of every device, no group
    RANK=0 WORLD_SIZE=2 GLOO_SOCKET_IFNAME=wg-geotrain python -m recipes.cluster_check --link \\
        --store 10.99.0.1:29531 --serve-store --payload-bytes 16138884

With --store the group meets in an authenticated recipes.elastic_store (rank 0 serves it with
--serve-store); its token comes from main(token=...) or the file GEOTRAIN_ELASTIC_STORE_TOKEN_FILE
names, never from the command line. --link times the all-reduce only (no burn-in).
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


def burn_in(rank: int, device: torch.device, seconds: float) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"rank": rank, "device": name, "matmul": matmul_rate(device, seconds), "memory": memory_test(device)}


def every_device(seconds: float) -> int:
    """--devices: each GPU in turn (the CPU where none is), one line each; no collective."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for index in range(max(1, count)):
        device = torch.device(f"cuda:{index}") if count else torch.device("cpu")
        if count:
            torch.cuda.set_device(device)
        print(PREFIX + json.dumps(burn_in(index, device, seconds)), flush=True)
    return 0


def network_store(address: str, serve: bool, token: bytes | None, rank: int, bind: str | None = None):
    """The authenticated store at HOST:PORT (rank 0 serves it with --serve-store, on `bind` where the
    address is a name others resolve, e.g. a pod's own IP): (store, server)."""
    from recipes import elastic_store
    from recipes.elastic_store_client import TOKEN_FILE_ENV, NetworkStore

    host, _, port = address.rpartition(":")
    token = token if token is not None else elastic_store.read_token(os.environ[TOKEN_FILE_ENV])
    server = elastic_store.StoreServer(bind or host, int(port), token, log=lambda line: None).start() \
        if serve and rank == 0 else None
    return NetworkStore(host, int(port), token, timeout=timedelta(seconds=120)), server


def main(argv: list[str] | None = None, token: bytes | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--payload-bytes", type=int, default=16 << 20)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--devices", action="store_true", help="burn in every device, no collective")
    parser.add_argument("--link", action="store_true", help="the all-reduce only, no burn-in")
    parser.add_argument("--store", metavar="HOST:PORT", help="meet in a recipes.elastic_store there")
    parser.add_argument("--serve-store", action="store_true", help="rank 0 serves the --store")
    parser.add_argument("--store-bind", metavar="ADDR", help="the address rank 0 serves it on (default: --store's host)")
    args = parser.parse_args(argv)
    if args.devices:
        return every_device(args.seconds)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank)) % torch.cuda.device_count()}"
                          if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    result = {"rank": rank} if args.link else burn_in(rank, device, args.seconds)
    server = None
    if args.store:
        store, server = network_store(args.store, args.serve_store, token, rank, args.store_bind)
    else:
        store = open_file_store(os.environ[GROUP_STORE_ENV], timedelta(seconds=120))
    dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    try:
        result["all_reduce"] = all_reduce(args.payload_bytes, device, args.iterations)
        dist.barrier()  # the store's host stays up until every rank is done with it
    finally:
        dist.destroy_process_group()
        if server is not None:
            server.close()
    print(PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
