"""Per-rank checkpoints, written atomically, and resume from the latest one every rank has.

Each rank saves its own file (local weights, inner optimizer, error feedback and
data position differ between ranks) as `checkpoints/step_XXXXXXXX/rank_R.pt`,
via a temp file and rename, so a kill -9 mid-write leaves the previous one intact.
"""

from __future__ import annotations

import random

import numpy
import torch
import torch.distributed as dist



def rng_state() -> dict:
    state = {"torch": torch.random.get_rng_state(), "python": random.getstate(),
             "numpy": numpy.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.random.set_rng_state(state["torch"])
    random.setstate(state["python"])
    numpy.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def common_step(mine: int | None, complete: list[int], world_size: int) -> int | None:
    """The newest step every rank holds complete (agreed over the group); `mine` when alone."""
    if world_size == 1 or not dist.is_initialized():
        return mine
    everyone: list = [None] * world_size
    dist.all_gather_object(everyone, sorted(complete))
    common = set.intersection(*(set(s) for s in everyone))
    return max(common) if common else None
