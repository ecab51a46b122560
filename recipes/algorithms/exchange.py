"""How a pseudo-gradient is averaged across ranks: full precision, or quantised with error feedback.

Each exchange has `start(delta) -> Pending` (collective issued, maybe async) and
`finish(pending) -> average`. Splitting the two lets DiLoCo overlap the network
with the next inner steps; `Pending.sent` is kept so a resumed run can reissue it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from recipes.compression import BlockCodec, ErrorFeedback
from recipes.distributed import Wire


@dataclass
class Pending:
    """A collective in flight: what this rank sent, and the handle to wait on."""

    sent: torch.Tensor
    work: Any = None
    gathered: list | None = None


def gather(wire, payload: torch.Tensor, async_op: bool = False) -> Pending:
    """All-gather a compressed payload, now or in the background (overlap)."""
    if async_op:
        work, gathered = wire.all_gather(payload, async_op=True)
        return Pending(sent=payload, work=work, gathered=gathered)
    return Pending(sent=payload, gathered=wire.all_gather(payload))


class GatheredExchange:
    """Compressed payloads are all-gathered, each decoded, and averaged: subclasses give
    `decode(payload)` and start by encoding into a payload."""

    wire: Wire

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reissue(self, payload: torch.Tensor, async_op: bool = False) -> Pending:
        return gather(self.wire, payload, async_op)

    def finish(self, pending: Pending) -> torch.Tensor:
        if pending.work is not None:
            pending.work.wait()
        return torch.stack([self.decode(p) for p in pending.gathered]).mean(dim=0)


class FullPrecisionExchange:
    """fp32 or bf16 all-reduce: values sum on the wire, no scales needed."""

    def __init__(self, numel: int, bits: int, wire: Wire) -> None:
        self.dtype = torch.float32 if bits == 32 else torch.bfloat16
        self.wire = wire

    def start(self, delta: torch.Tensor, async_op: bool = False) -> Pending:
        sent = delta.to(self.dtype)
        return self.reissue(sent, async_op)

    def reissue(self, sent: torch.Tensor, async_op: bool = False) -> Pending:
        buf = sent.clone()
        pending = Pending(sent=sent, work=self.wire.all_reduce_async(buf), gathered=[buf])
        if not async_op and pending.work is not None:
            pending.work.wait()
            pending.work = None
        return pending

    def finish(self, pending: Pending) -> torch.Tensor:
        if pending.work is not None:
            pending.work.wait()
        return pending.gathered[0].float() / self.wire.world_size

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class QuantizedExchange(GatheredExchange):
    """fp8/fp4 block codec with error feedback; payloads are all-gathered and averaged after decoding."""

    def __init__(self, numel: int, bits: int, block: int, wire: Wire, error_feedback: bool = True) -> None:
        self.codec = BlockCodec(bits, block)
        self.feedback = ErrorFeedback(numel, enabled=error_feedback)
        self.numel = numel
        self.wire = wire

    def start(self, delta: torch.Tensor, async_op: bool = False) -> Pending:
        if self.feedback.residual is not None:
            self.feedback.residual = self.feedback.residual.to(delta.device)
        payload, _ = self.feedback.compress(delta, self.codec)
        return self.reissue(payload, async_op)

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        return self.codec.decode(payload, self.numel)

    def flush(self, bits: int) -> torch.Tensor | None:
        """Average what error feedback still holds, sent once at `bits` (the end-of-training step)."""
        if self.feedback.residual is None:
            return None
        codec = BlockCodec(bits, self.codec.block)
        payload = codec.encode(self.feedback.residual)
        self.feedback.residual = self.feedback.residual - codec.decode(payload, self.numel)
        return torch.stack([codec.decode(p, self.numel) for p in self.wire.all_gather(payload)]).mean(dim=0)

    def state_dict(self) -> dict:
        return self.feedback.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.feedback.load_state_dict(state)
