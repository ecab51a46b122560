"""Per-rank checkpoints, written atomically, and resume from the latest one every rank has.

Each rank saves its own file (local weights, inner optimizer, error feedback and
data position differ between ranks) as `checkpoints/step_XXXXXXXX/rank_R.pt`,
via a temp file and rename, so a kill -9 mid-write leaves the previous one intact.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import numpy
import torch
import torch.distributed as dist

STEP_DIR = re.compile(r"^step_(\d{8})$")


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


def checkpoint_root(out_dir: Path) -> Path:
    return out_dir / "checkpoints"


def save(out_dir: Path, step: int, rank: int, state: dict, keep: int) -> Path:
    """Write this rank's state for `step` atomically; prune all but the newest `keep`."""
    step_dir = checkpoint_root(out_dir) / f"step_{step:08d}"
    step_dir.mkdir(parents=True, exist_ok=True)
    final = step_dir / f"rank_{rank}.pt"
    tmp = step_dir / f".rank_{rank}.pt.tmp"
    torch.save(state, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    _prune(out_dir, rank, keep)
    return final


def _prune(out_dir: Path, rank: int, keep: int) -> None:
    steps = own_steps(out_dir, rank)
    for step in steps[:-keep] if keep > 0 else []:
        step_dir = checkpoint_root(out_dir) / f"step_{step:08d}"
        (step_dir / f"rank_{rank}.pt").unlink(missing_ok=True)
        if not any(step_dir.glob("rank_*.pt")):
            shutil.rmtree(step_dir, ignore_errors=True)


def own_steps(out_dir: Path, rank: int) -> list[int]:
    root = checkpoint_root(out_dir)
    if not root.is_dir():
        return []
    steps = []
    for child in root.iterdir():
        match = STEP_DIR.match(child.name)
        if match and (child / f"rank_{rank}.pt").is_file():
            steps.append(int(match.group(1)))
    return sorted(steps)


def latest_common_step(out_dir: Path, rank: int, world_size: int) -> int | None:
    """The newest step for which every rank has a checkpoint (agreed over the group)."""
    mine = set(own_steps(out_dir, rank))
    if world_size > 1 and dist.is_initialized():
        everyone: list = [None] * world_size
        dist.all_gather_object(everyone, sorted(mine))
        common = set.intersection(*(set(s) for s in everyone))
    else:
        common = mine
    return max(common) if common else None


def load(out_dir: Path, step: int, rank: int) -> dict:
    path = checkpoint_root(out_dir) / f"step_{step:08d}" / f"rank_{rank}.pt"
    return torch.load(path, map_location="cpu", weights_only=False)


def common_step(mine: int | None, complete: list[int], world_size: int) -> int | None:
    """The newest step every rank holds complete (agreed over the group); `mine` when alone."""
    if world_size == 1 or not dist.is_initialized():
        return mine
    everyone: list = [None] * world_size
    dist.all_gather_object(everyone, sorted(complete))
    common = set.intersection(*(set(s) for s in everyone))
    return max(common) if common else None
