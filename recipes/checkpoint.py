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
    """Generator states as tensors and plain values only, so checkpoints load weights-only."""
    numpy_state = numpy.random.get_state(legacy=False)
    numpy_state["state"] = {"key": torch.from_numpy(numpy_state["state"]["key"].astype(numpy.int64)),
                            "pos": int(numpy_state["state"]["pos"])}
    state = {"torch": torch.random.get_rng_state(), "python": random.getstate(), "numpy": numpy_state}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.random.set_rng_state(state["torch"])
    random.setstate(state["python"])
    numpy_state = dict(state["numpy"])
    numpy_state["state"] = {"key": numpy_state["state"]["key"].numpy().astype(numpy.uint32),
                            "pos": numpy_state["state"]["pos"]}
    numpy.random.set_state(numpy_state)
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


MAX_AGREED_STEPS = 4096  # the newest checkpoints a rank offers when the group agrees on one


def common_step(mine: int | None, complete: list[int], world_size: int) -> int | None:
    """The newest step every rank holds complete (agreed over the group); `mine` when alone."""
    if world_size == 1 or not dist.is_initialized():
        return mine
    everyone = _gather_steps(sorted(complete)[-MAX_AGREED_STEPS:], world_size)
    common = set.intersection(*everyone)
    return max(common) if common else None


def _gather_steps(steps: list[int], world_size: int) -> list[set[int]]:
    """Every rank's step numbers, as int64 tensors (lengths first, then padded with -1):
    nothing a peer sends is unpickled, as all_gather_object would."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    count = torch.tensor([len(steps)], dtype=torch.int64, device=device)
    counts = [torch.zeros_like(count) for _ in range(world_size)]
    dist.all_gather(counts, count)
    width = max(1, min(MAX_AGREED_STEPS, max(int(c) for c in counts)))
    mine = torch.full((width,), -1, dtype=torch.int64, device=device)
    if steps:
        mine[:len(steps)] = torch.tensor(steps, dtype=torch.int64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(world_size)]
    dist.all_gather(gathered, mine)
    return [{int(v) for v in t.tolist() if v >= 0} for t in gathered]
