"""DDP baseline: average every gradient across ranks after each backward.

Hand-rolled rather than `DistributedDataParallel` so that the wire bytes go
through the same counter as every other algorithm (one flat fp32 all-reduce per
bucket, the same traffic DDP's ring all-reduce makes).
"""

from __future__ import annotations

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from recipes.distributed import Wire

BUCKET_BYTES = 25 * 1024 * 1024


class DDP:
    """Every step is a synchronisation; `outer_step` counts them for the metrics."""

    name = "ddp"

    def __init__(self, model: torch.nn.Module, wire: Wire) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.wire = wire
        self.outer_step = 0
        self.buckets = _buckets(self.params)

    def after_backward(self) -> None:
        for bucket in self.buckets:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in bucket]
            flat = _flatten_dense_tensors(grads)
            self.wire.all_reduce_mean_(flat)
            for p, g in zip(bucket, _unflatten_dense_tensors(flat, grads)):
                if p.grad is None:
                    p.grad = g
                else:
                    p.grad.copy_(g)

    def after_optimizer_step(self, step: int) -> bool:
        self.outer_step += 1
        return True

    def finish(self, step: int) -> None:
        """Nothing in flight between steps."""

    def state_dict(self) -> dict:
        return {"outer_step": self.outer_step}

    def load_state_dict(self, state: dict) -> None:
        self.outer_step = state["outer_step"]


def _buckets(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    buckets, current, size = [], [], 0
    for p in params:
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= BUCKET_BYTES:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets
