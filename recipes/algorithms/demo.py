"""DeMo (decoupled momentum) compression of the pseudo-gradient: chunked DCT, top-k, error feedback.

Each rank keeps a decoupled momentum m <- decay*m + delta, sends only the k
largest DCT coefficients of every `chunk`-wide piece of m and subtracts what it
sent from m (error feedback). Indices are packed at ceil(log2 chunk) bits and
values travel as block-scaled fp8 or fp4, so a 64-wide chunk costs k*(6+8) or k*(6+4) bits.
The payload is all-gathered: every rank's traffic grows with the number of ranks.
"""

from __future__ import annotations

import math

import torch

from recipes.algorithms.exchange import GatheredExchange, Pending
from recipes.compression import BlockCodec
from recipes.distributed import Wire


def dct_matrix(n: int) -> torch.Tensor:
    """Orthonormal DCT-II matrix D: coefficients = D @ x, and x = D.T @ coefficients."""
    k = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(n, dtype=torch.float64).unsqueeze(0)
    d = torch.cos(math.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2.0 / n)
    d[0] /= math.sqrt(2.0)
    return d.float()


def pack_bits(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack non-negative integers < 2**bits into a dense uint8 stream (little-endian bit order)."""
    shifts = torch.arange(bits, device=values.device)
    stream = ((values.long().unsqueeze(1) >> shifts) & 1).flatten()
    stream = torch.cat([stream, stream.new_zeros((-stream.numel()) % 8)]).view(-1, 8)
    weights = 2 ** torch.arange(8, device=values.device)
    return (stream * weights).sum(dim=1).to(torch.uint8)


def unpack_bits(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    shifts = torch.arange(8, device=packed.device)
    stream = ((packed.long().unsqueeze(1) >> shifts) & 1).flatten()[:count * bits].view(count, bits)
    return (stream << torch.arange(bits, device=packed.device)).sum(dim=1)


class DctTopKCodec:
    """Sparse DCT payloads: packed indices then fp8 values with block scales."""

    def __init__(self, numel: int, chunk: int, topk: int, value_bits: int = 8, value_block: int = 128,
                 transform: str = "dct") -> None:
        if not 0 < topk <= chunk:
            raise ValueError(f"topk must be in 1..{chunk}, not {topk}")
        self.numel, self.chunk, self.topk = numel, chunk, topk
        self.chunks = math.ceil(numel / chunk)
        self.index_bits = max(1, math.ceil(math.log2(chunk)))
        self.values = BlockCodec(value_bits, value_block)
        self.dct = dct_matrix(chunk) if transform == "dct" else None  # `none`: top-k of the values themselves

    @property
    def sent_values(self) -> int:
        return self.chunks * self.topk

    def payload_bytes(self) -> int:
        return math.ceil(self.sent_values * self.index_bits / 8) + self.values.payload_bytes(self.sent_values)

    def to_coefficients(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.cat([x.flatten(), x.new_zeros(self.chunks * self.chunk - x.numel())])
        if self.dct is None:
            return flat.view(self.chunks, self.chunk)
        return flat.view(self.chunks, self.chunk) @ self.dct.to(x.device).T

    def from_coefficients(self, coeffs: torch.Tensor) -> torch.Tensor:
        if self.dct is None:
            return coeffs.flatten()[:self.numel]
        return (coeffs @ self.dct.to(coeffs.device)).flatten()[:self.numel]

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (payload, the dense vector the receivers will decode)."""
        coeffs = self.to_coefficients(x)
        idx = coeffs.abs().topk(self.topk, dim=1).indices
        vals = coeffs.gather(1, idx)
        payload = torch.cat([pack_bits(idx.flatten(), self.index_bits), self.values.encode(vals.flatten())])
        return payload, self.decode(payload)

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        index_bytes = math.ceil(self.sent_values * self.index_bits / 8)
        idx = unpack_bits(payload[:index_bytes], self.index_bits, self.sent_values).view(self.chunks, self.topk)
        vals = self.values.decode(payload[index_bytes:], self.sent_values).view(self.chunks, self.topk)
        coeffs = torch.zeros(self.chunks, self.chunk, device=payload.device)
        coeffs.scatter_(1, idx, vals)
        return self.from_coefficients(coeffs)


class DemoExchange(GatheredExchange):
    """DeMo's decoupled momentum as the error-feedback buffer of a DCT top-k exchange."""

    def __init__(self, numel: int, chunk: int, topk: int, decay: float, wire: Wire, value_bits: int = 8,
                 value_block: int = 128, transform: str = "dct") -> None:
        self.codec = DctTopKCodec(numel, chunk, topk, value_bits, value_block, transform)
        self.momentum = torch.zeros(numel)
        self.decay = decay
        self.wire = wire

    def start(self, delta: torch.Tensor, async_op: bool = False) -> Pending:
        self.momentum = self.momentum.to(delta.device).mul_(self.decay).add_(delta)
        payload, sent = self.codec.encode(self.momentum)
        self.momentum.sub_(sent)
        return self.reissue(payload, async_op)

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        return self.codec.decode(payload)

    def state_dict(self) -> dict:
        return {"momentum": self.momentum.cpu()}

    def load_state_dict(self, state: dict) -> None:
        self.momentum = state["momentum"]


def sign_outer_step(global_flat: torch.Tensor, avg_update: torch.Tensor, lr: float) -> None:
    """DeMo's step: move every weight by lr in the direction of the averaged update."""
    global_flat.sub_(torch.sign(avg_update), alpha=lr)
