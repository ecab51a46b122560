"""Helpers shared by the recipe tests: run recipes under a real torchrun on gloo."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY_GPT = REPO / "recipes" / "configs" / "gpt-neo" / "tiny.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gloo_rank(rank: int, out: str, store_file: str, body, world: int = 2) -> None:
    import torch.distributed as dist

    # the ranks meet in a FileStore in the test's folder, as a local workspace's do: no store on a port
    store = dist.FileStore(store_file, world)
    dist.init_process_group("gloo", rank=rank, world_size=world, store=store)
    result = body(rank)
    with open(f"{out}/rank{rank}.json", "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


def gloo_ranks(body, out: Path, world: int) -> list:
    """`body(rank)` in `world` real spawned processes joined by a gloo process group; what each
    returned (JSON), by rank. `body` must be a module-level function (spawn pickles it by name)."""
    import torch.multiprocessing as mp

    store_file = out / f"gloo-store-{uuid.uuid4().hex}"  # a new one per group: a FileStore keeps its keys
    mp.start_processes(_gloo_rank, args=(str(out), str(store_file), body, world), nprocs=world,
                       start_method="spawn")
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world)]


def two_gloo_ranks(body, out: Path) -> list:
    return gloo_ranks(body, out, 2)


def against_fp32_mean(x, out) -> tuple[bool, float, float]:
    """One round of an exchange over the whole group against a plain fp32 all-reduce of its input `x`
    (outside any byte counter): whether every rank got the same `out`, its largest error, and the
    largest |x| of any rank."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    exact = x.clone()
    dist.all_reduce(exact)
    exact /= world
    outs = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(outs, out)
    amax = x.abs().max().reshape(1)
    dist.all_reduce(amax, op=dist.ReduceOp.MAX)
    return all(torch.equal(outs[0], o) for o in outs), float((out - exact).abs().max()), float(amax)


def recipe_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "HF_TOKEN")}
    env.update(PYTHONUNBUFFERED="1", WANDB_MODE="offline", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    env.update(extra)
    return env


def torchrun_cmd(config: Path, overrides: list[str], nproc: int = 2, max_restarts: int = 0) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--tee", "3",
            "--max-restarts", str(max_restarts), "-m", "recipes.train", "--config", str(config), *overrides]


def run_torchrun(config: Path, overrides: list[str], nproc: int = 2, timeout: int = 240,
                 **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(torchrun_cmd(config, overrides, nproc), cwd=REPO, env=recipe_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def read_metrics(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line]


@pytest.fixture
def tiny_gpt() -> Path:
    return TINY_GPT
