"""Parallel streams: cut a large collective into stripes, each on its own gloo group (own TCP connections).

On a long fat WAN link one TCP connection rarely fills the pipe: its window ramps
up slowly after every idle gap and is capped by buffers over a long round trip.
Several connections in parallel (the Atlas paper's result) recover the bandwidth.
Set GEOTRAIN_WAN_STREAMS=K (default 1: off); tensors smaller than
GEOTRAIN_WAN_STREAM_MIN_BYTES (default 256 KiB) stay on one connection, where
striping only adds overhead.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


class StripedWork:
    """Waits for every stripe; looks like one async handle."""

    def __init__(self, works: list) -> None:
        self.works = works

    def wait(self, *args, **kwargs) -> bool:
        for work in self.works:
            work.wait(*args, **kwargs)
        return True

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self.works)


class Streams:
    """`count` process groups over all ranks; group 0 is the default one."""

    def __init__(self, count: int, min_bytes: int = 256 << 10) -> None:
        if count < 1:
            raise ValueError(f"GEOTRAIN_WAN_STREAMS must be at least 1, not {count}")
        self.count, self.min_bytes = count, min_bytes
        # Every rank creates the same groups in the same order: new_group is collective.
        self.groups = [None] + [dist.new_group(backend="gloo") for _ in range(count - 1)]

    @classmethod
    def from_env(cls) -> "Streams | None":
        count = int(os.environ.get("GEOTRAIN_WAN_STREAMS", "1"))
        if count <= 1 or not dist.is_initialized():
            return None
        return cls(count, int(os.environ.get("GEOTRAIN_WAN_STREAM_MIN_BYTES", str(256 << 10))))

    def _bounds(self, tensor: torch.Tensor) -> list[tuple[int, int]]:
        n = tensor.numel()
        ways = self.count if n * tensor.element_size() >= self.min_bytes else 1
        edges = [n * i // ways for i in range(ways + 1)]
        return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]

    def all_reduce(self, tensor: torch.Tensor, async_op: bool = False):
        """Sum-all-reduce a contiguous tensor in place, one stripe per group."""
        flat = tensor.view(-1)
        works = [dist.all_reduce(flat[a:b], group=self.groups[i], async_op=True)
                 for i, (a, b) in enumerate(self._bounds(flat))]
        return _handle(works, async_op)

    def all_gather(self, out: list[torch.Tensor], payload: torch.Tensor, async_op: bool = False):
        """All-gather a 1-D payload into `out` (one tensor per rank), stripe by stripe."""
        works = [dist.all_gather([o[a:b] for o in out], payload[a:b].contiguous(), group=self.groups[i],
                                 async_op=True)
                 for i, (a, b) in enumerate(self._bounds(payload))]
        return _handle(works, async_op)


def _handle(works: list, async_op: bool) -> StripedWork | None:
    """The async handle, or None after waiting (the torch.distributed convention)."""
    handle = StripedWork(works)
    if async_op:
        return handle
    handle.wait()
    return None
