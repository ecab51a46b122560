"""What crosses the wire: block-scaled fp8 / packed fp4 codecs and error feedback.

A codec turns a flat fp32 vector into a uint8 payload and back. Payloads (or pieces of
them, cut on block boundaries, for a reduce-scatter) are what ranks send, so their length
is exactly the bytes on the wire: fp4 is two 4-bit codes per byte plus one fp32 scale per
block, nothing else.
"""

from __future__ import annotations

import math

import torch

FP8_MAX = 448.0  # largest finite float8_e4m3fn
FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # e2m1 magnitudes by code
FP4_MIDPOINTS = (FP4_VALUES[1:] + FP4_VALUES[:-1]) / 2
FP4_MAX = 6.0


class BlockCodec:
    """Quantise blocks of `block` values with one fp32 scale per block.

    8: fp8 e4m3 (absmax -> 448); 4: fp4 e2m1 (absmax -> 6), two codes per byte;
    1: sign bits, eight per byte, scaled by the block's mean |x| (1-bit with error feedback).
    """

    def __init__(self, bits: int, block: int = 128) -> None:
        if bits not in (8, 4, 1):
            raise ValueError(f"BlockCodec handles 8, 4 or 1 bits, not {bits}")
        multiple = 8 if bits == 1 else 2  # whole bytes of codes per block
        if block <= 0 or block % multiple:
            raise ValueError(f"block must be a positive multiple of {multiple}, not {block}")
        self.bits, self.block = bits, block

    def payload_bytes(self, numel: int) -> int:
        blocks = math.ceil(numel / self.block)
        return self._code_bytes(numel) + blocks * 4

    def _code_bytes(self, numel: int) -> int:
        """Codes for the values only: the padding of the last block is not sent."""
        return math.ceil(numel * self.bits / 8)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        blocks = _pad_to_blocks(x.detach().float().flatten(), self.block)
        tiny = torch.finfo(torch.float32).tiny
        if self.bits == 1:  # mean |x| over the values a block holds: the last block's padding is not counted
            held = x.numel() - torch.arange(blocks.shape[0], device=blocks.device) * self.block
            counts = held.clamp(max=self.block).clamp_min(1).unsqueeze(1).float()
            scales = (blocks.abs().sum(dim=1, keepdim=True) / counts).clamp_min(tiny)
            codes = _pack_signs(blocks.flatten())[:self._code_bytes(x.numel())]
            return torch.cat([codes, scales.flatten().view(torch.uint8)])
        absmax = blocks.abs().amax(dim=1, keepdim=True)
        top = FP8_MAX if self.bits == 8 else FP4_MAX
        # clamp: a denormal absmax / top underflows to 0 and 0/0 would put NaN on the wire
        scales = (absmax / top).clamp_min(tiny)
        scaled = blocks / scales
        if self.bits == 8:
            codes = scaled.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8).flatten()
        else:
            codes = _pack_nibbles(_fp4_codes(scaled.flatten()))
        codes = codes[:self._code_bytes(x.numel())]
        return torch.cat([codes, scales.flatten().view(torch.uint8)])

    def piece(self, payload: torch.Tensor, numel: int, start: int, stop: int) -> torch.Tensor:
        """What encode(x[start:stop]) gives, cut out of encode(x) (x of `numel` values; `start` on a
        block boundary): the piece's codes, then its blocks' scales. A reduce-scatter sends pieces."""
        if start % self.block:
            raise ValueError(f"a piece starts on a block boundary (a multiple of {self.block}), not at {start}")
        code_bytes = self._code_bytes(numel)
        scales = code_bytes + 4 * (start // self.block), code_bytes + 4 * math.ceil(stop / self.block)
        return torch.cat([payload[start * self.bits // 8:self._code_bytes(stop)], payload[scales[0]:scales[1]]])

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        blocks = math.ceil(numel / self.block)
        code_bytes = self._code_bytes(numel)
        codes, scale_bytes = payload[:code_bytes], payload[code_bytes:code_bytes + blocks * 4]
        codes = torch.cat([codes, codes.new_zeros(blocks * self.block * self.bits // 8 - code_bytes)])
        scales = scale_bytes.clone().view(torch.float32).view(blocks, 1)
        if self.bits == 8:
            values = codes.view(torch.float8_e4m3fn).float()
        elif self.bits == 1:
            values = _unpack_signs(codes)
        else:
            values = _fp4_values(_unpack_nibbles(codes))
        return (values.view(blocks, self.block) * scales).flatten()[:numel]


def _pad_to_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    pad = (-x.numel()) % block
    if pad:
        x = torch.cat([x, x.new_zeros(pad)])
    return x.view(-1, block)


def _fp4_codes(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest e2m1 value: 3 magnitude bits and a sign bit (bit 3)."""
    mids = FP4_MIDPOINTS.to(x.device)
    magnitude = torch.bucketize(x.abs().clamp(max=FP4_MAX), mids).to(torch.uint8)
    return magnitude | ((x < 0).to(torch.uint8) << 3)


def _fp4_values(codes: torch.Tensor) -> torch.Tensor:
    table = FP4_VALUES.to(codes.device)
    magnitude = table[(codes & 7).long()]
    return torch.where((codes & 8) > 0, -magnitude, magnitude)


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    pairs = codes.view(-1, 2)
    return pairs[:, 0] | (pairs[:, 1] << 4)


def _pack_signs(x: torch.Tensor) -> torch.Tensor:
    bits = (x < 0).to(torch.uint8).view(-1, 8)
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=x.device)
    return (bits * weights).sum(dim=1, dtype=torch.uint8)


def _unpack_signs(packed: torch.Tensor) -> torch.Tensor:
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bits = ((packed.unsqueeze(1) >> shifts) & 1).flatten().float()
    return 1.0 - 2.0 * bits


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    return torch.stack([packed & 15, packed >> 4], dim=1).flatten()


class ErrorFeedback:
    """Keeps what the codec dropped and adds it to the next input, so nothing is lost for good."""

    def __init__(self, numel: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self.residual = torch.zeros(numel) if enabled else None

    def compress(self, x: torch.Tensor, codec: BlockCodec) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (payload, what the receiver will decode from it)."""
        target = x + self.residual if self.enabled else x
        payload = codec.encode(target)
        decoded = codec.decode(payload, x.numel())
        if self.enabled:
            self.residual = target - decoded
        return payload, decoded

    def state_dict(self) -> dict:
        return {"residual": self.residual}

    def load_state_dict(self, state: dict) -> None:
        self.residual = state["residual"]


def hadamard(x: torch.Tensor, rows_at_once: int = 4096) -> torch.Tensor:
    """Orthonormal Walsh-Hadamard transform of each row (width a power of two); its own inverse.
    Rows go `rows_at_once` at a time, so the butterflies' temporaries stay small for big models."""
    rows, n = x.shape
    out = torch.empty_like(x)
    for first in range(0, rows, rows_at_once):
        y = x[first:first + rows_at_once]
        r, h = y.shape[0], 1
        while h < n:
            y = y.reshape(r, n // (2 * h), 2, h)
            a, b = y[:, :, 0, :], y[:, :, 1, :]
            y = torch.stack([a + b, a - b], dim=2)
            h *= 2
        out[first:first + r] = y.reshape(r, n) / math.sqrt(n)
    return out


def block_codec(bits: int, block: int, rotate: bool = False, seed: int = 0):
    """The codec a quantised exchange sends with: a BlockCodec, rotated when asked."""
    codec = BlockCodec(bits, block)
    return RotatedCodec(codec, seed) if rotate else codec


class RotatedCodec:
    """A block codec applied after a fixed random rotation of each whole block (random signs, then
    Walsh-Hadamard): outliers spread over the block, so one scale per block fits every value.
    The rotation is the same on every rank (`seed`). A last partial block goes unrotated, so the
    payload is exactly the inner codec's."""

    def __init__(self, codec: BlockCodec, seed: int = 0) -> None:
        if codec.block & (codec.block - 1):
            raise ValueError(f"a rotated codec needs a block that is a power of two, not {codec.block}")
        self.codec, self.block, self.bits = codec, codec.block, codec.bits
        g = torch.Generator().manual_seed(seed)
        self.signs = torch.randint(0, 2, (codec.block,), generator=g).float() * 2 - 1

    def payload_bytes(self, numel: int) -> int:
        return self.codec.payload_bytes(numel)

    def piece(self, payload: torch.Tensor, numel: int, start: int, stop: int) -> torch.Tensor:
        """Whole blocks turn alone, so a piece on block boundaries is the inner codec's piece."""
        return self.codec.piece(payload, numel, start, stop)

    def _turn(self, x: torch.Tensor, forward: bool) -> torch.Tensor:
        whole = x.numel() // self.block * self.block
        blocks, signs = x[:whole].view(-1, self.block), self.signs.to(x.device)
        turned = hadamard(blocks * signs) if forward else hadamard(blocks) * signs
        return torch.cat([turned.flatten(), x[whole:]])

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.codec.encode(self._turn(x.detach().float().flatten(), forward=True))

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        return self._turn(self.codec.decode(payload, numel), forward=False)
