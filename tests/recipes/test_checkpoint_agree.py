"""Ranks agree on the newest checkpoint they all hold, over two real gloo ranks, exchanging
step numbers as tensors (nothing a peer sends is unpickled)."""

from __future__ import annotations

import json
import os

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from recipes import checkpoint
from tests.recipes.conftest import free_port

CASES = [  # (rank 0's complete steps, rank 1's) -> the common newest
    (([10, 20, 30], [10, 20]), 20),
    (([], [10]), None),
    (([5], [7]), None),
    (([1, 2, 3, 4], [4, 3, 2, 1]), 4),
]


def _rank(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    agreed = [checkpoint.common_step(max(steps[rank], default=None), steps[rank], 2) for steps, _ in CASES]
    with open(f"{out}/rank{rank}.json", "w") as fh:
        json.dump(agreed, fh)
    dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_ranks_agree_on_the_newest_common_checkpoint(tmp_path):
    mp.start_processes(_rank, args=(free_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    expected = [common for _, common in CASES]
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == expected
