"""How a pseudo-gradient is averaged across ranks: full precision, or quantised with error feedback.

Each exchange has `start(delta) -> Pending` (collective issued, maybe async) and
`finish(pending) -> average`. Splitting the two lets DiLoCo overlap the network
with the next inner steps; `Pending.sent` is kept so a resumed run can reissue it.
An exchange in two stages (the quantised reduce-scatter, then the all-gather) also has
`progress(pending)`, which starts the second; DiLoCo calls it halfway through a phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from recipes.algorithms.reduce_scatter import FlatPeers, QuantizedAllReduce
from recipes.compression import BlockCodec, ErrorFeedback, block_codec
from recipes.distributed import Wire


@dataclass
class Pending:
    """A collective in flight: what this rank sent, and the handle to wait on."""

    sent: torch.Tensor
    work: Any = None
    gathered: list | None = None
    sync: int = 0  # which sync of the exchange this is (a subset exchange decodes by it)
    stage: int = 0  # a two-stage exchange: 1 while its reduce-scatter is in flight, 2 its all-gather


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
    """fp8/fp4/1-bit block codec with error feedback. With every value sent (every preset), from 3 ranks the
    mean goes by quantised reduce-scatter + all-gather, error feedback at both stages where the preset has it
    (recipes.algorithms.reduce_scatter): 2(N-1)/N of one payload per rank, like DDP's ring all-reduce.
    The mean is quantised twice: on the Markov bench at 4 workers (seed 0) high sent 970,064 bytes per rank
    instead of 1,947,120 and ended at 2.3782 against the all-gather's 2.3764 (entropy floor 2.3492).
    Otherwise payloads are all-gathered and averaged after decoding, N-1 payloads per rank:
    - at 2 ranks (or 1) both send one payload, and the all-gather quantises once where the reduce-scatter
      quantises twice: on the Markov bench (2 workers, seed 0) the reduce-scatter ended medium at 2.3813
      against 2.3798 and high at 2.3829 against 2.3806;
    - a shared random subset (diloco.density < 1): its blocks change every sync, so the reduce stage's error
      feedback would have no piece of the vector to stay with from one sync to the next.
    Without error feedback (ultra) the reducer's re-encode of the mean drops what nothing carries to a later
    sync, as the hierarchical exchange's WAN stage always did. ultra went by all-gather until the recipe
    protocol (recipes/bench/RESULTS.md) measured 3.0x the bytes per worker from 2 to 4 workers that way
    (its target: 1.5x) and the reduce-scatter's loss beside the all-gather's.
    Both ways send the same whole payload (the reduce-scatter cuts it in pieces), so a payload in flight in
    a checkpoint is re-sent whichever way the resumed run goes."""

    def __init__(self, numel: int, bits: int, block: int, wire: Wire, error_feedback: bool = True,
                 density: float = 1.0, seed: int = 0, rotate: bool = False) -> None:
        self.numel = numel
        self.wire = wire
        self.density, self.seed = density, seed
        self.syncs = 0  # every rank draws the same subset for the same sync
        self._drawn: dict[int, torch.Tensor] = {}
        self.mean: QuantizedAllReduce | None = None  # the reduce-scatter, where it can be the way
        if density >= 1.0:
            self.peers = FlatPeers(wire)
            self.mean = QuantizedAllReduce(numel, bits, block, self.peers, error_feedback, rotate=rotate, seed=seed)
            self.codec = self.mean.codec
            self.feedback = self.mean.feedback  # stage 1's: what this rank's encodes dropped
        else:
            self.codec = block_codec(bits, block, rotate, seed)
            self.feedback = ErrorFeedback(numel, enabled=error_feedback)
        self.held: torch.Tensor | None = None  # stage 2's residual from before the all-gather in flight

    def _reduces(self) -> bool:
        """The reduce-scatter where it sends fewer bytes than the all-gather: from 3 ranks."""
        return self.mean is not None and self.peers.world_size > 2

    def subset(self, sync: int) -> torch.Tensor | None:
        """The blocks sync number `sync` sends (sorted), the same on every rank; None: all of them.
        Whole blocks are drawn (each keeps its one scale, and a billion-value model permutes a million
        block numbers, not a billion values), `density` of them. DiLoCo starts one exchange per outer
        step, so `sync` is the outer step every rank agrees on (elastic joiners take it from the source)."""
        if self.density >= 1.0:
            return None
        if sync not in self._drawn:
            blocks = math.ceil(self.numel / self.codec.block)
            count = max(1, math.ceil(blocks * self.density))
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + sync) % 2 ** 63)
            self._drawn = {sync: torch.randperm(blocks, generator=g)[:count].sort().values, **{
                k: v for k, v in self._drawn.items() if k >= sync - 1}}  # keep the one in flight
        return self._drawn[sync]

    def positions(self, sync: int) -> torch.Tensor | None:
        """The values sync number `sync` sends (for tests and tools; the exchange works on blocks)."""
        chosen = self.subset(sync)
        if chosen is None:
            return None
        block = self.codec.block
        at = (chosen.unsqueeze(1) * block + torch.arange(block)).flatten()
        return at[at < self.numel]

    def _sent_values(self, chosen: torch.Tensor) -> int:
        block, tail = self.codec.block, self.numel % self.codec.block
        last = math.ceil(self.numel / block) - 1
        return chosen.numel() * block - (block - tail if tail and int(chosen[-1]) == last else 0)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        block = self.codec.block
        return torch.nn.functional.pad(x, (0, (-x.numel()) % block)).view(-1, block)

    def _place(self, sent: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """The full-length vector holding `sent` (the chosen blocks' values, in order) in those blocks, zero elsewhere."""
        rows = self._rows(torch.zeros(self.numel, device=sent.device))
        rows[chosen.to(sent.device)] = torch.nn.functional.pad(sent, (0, chosen.numel() * self.codec.block
                                                                      - sent.numel())).view(-1, self.codec.block)
        return rows.flatten()[:self.numel]

    def start(self, delta: torch.Tensor, async_op: bool = False) -> Pending:
        if self.mean is not None:
            self.syncs += 1
            self.mean.arrange(self.peers.world_size, self.peers.me)  # before encoding: a changed group folds in
            if not self._reduces():  # what stage 2 held (a larger group before) goes in this rank's payload
                self.mean.fold(self.peers.world_size)
            return self.reissue(self.mean.scatter(delta), async_op)
        if self.feedback.residual is not None:
            self.feedback.residual = self.feedback.residual.to(delta.device)
        chosen = self.subset(self.syncs)
        self.syncs += 1
        if chosen is None:
            payload, _ = self.feedback.compress(delta, self.codec)
            return self.reissue(payload, async_op)
        if not self.feedback.enabled:
            raise ValueError("diloco.density below 1 needs diloco.error_feedback: true (what a sync does not "
                             "send waits there); set one of them")
        target = delta + self.feedback.residual
        n = self._sent_values(chosen)
        payload = self.codec.encode(self._rows(target)[chosen.to(delta.device)].flatten()[:n])
        self.feedback.residual = target - self._place(self.codec.decode(payload, n), chosen)  # what was not sent
        return self.reissue(payload, async_op)

    def reissue(self, payload: torch.Tensor, async_op: bool = False) -> Pending:
        """Send `payload` (the whole encoded vector, as start() made it or a checkpoint kept it)."""
        if not self._reduces():
            pending = gather(self.wire, payload, async_op)
        else:
            self.mean.arrange(self.peers.world_size, self.peers.me)
            pending = Pending(sent=payload, stage=1)
            pending.work = self.peers.exchange(self.mean.parts(payload), self.mean.scatter_sizes(), async_op=True)
            if not async_op:
                self.progress(pending)
        pending.sync = self.syncs - 1  # the latest started (a resumed run restores `syncs` first)
        return pending

    def progress(self, pending: Pending) -> None:
        """Stage 2 of a started reduce-scatter: wait for it, reduce this rank's piece, start the all-gather.
        Collectives must start in one order on every rank: DiLoCo calls this at the same step on all of
        them, finish() when nothing has."""
        if pending.stage != 1:
            return
        pending.stage = 2
        received = pending.work.parts()
        held = self.mean.reduce_feedback.residual  # a checkpoint now re-sends from here (None: no feedback)
        self.held = None if held is None else held.clone()
        reduced = self.mean.reduce(received)
        pending.work = self.peers.exchange([reduced] * len(received), self.mean.gather_sizes(), async_op=True)

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        return self.codec.decode(payload, self.numel)

    def finish(self, pending: Pending) -> torch.Tensor:
        if pending.stage:
            self.progress(pending)
            self.held = None
            return self.mean.assemble(pending.work.parts())
        chosen = self.subset(pending.sync)
        if chosen is None:
            return super().finish(pending)
        if pending.work is not None:
            pending.work.wait()
        n = self._sent_values(chosen)
        return self._place(torch.stack([self.codec.decode(p, n) for p in pending.gathered]).mean(dim=0), chosen)

    def flush(self, bits: int) -> torch.Tensor | None:
        """Average what error feedback still holds, sent once at `bits` (the end-of-training step)."""
        if self.feedback.residual is None:
            return None
        if self.mean is not None:  # both stages' residuals: stage 2's folded into stage 1's
            self.mean.arrange(self.peers.world_size, self.peers.me)
            self.mean.fold(self.peers.world_size)
        if self._reduces():  # by a reduce-scatter at `bits`
            once = QuantizedAllReduce(self.numel, bits, self.codec.block, self.peers)
            avg = once(self.feedback.residual)
            if once.feedback.enabled:  # what the flush itself dropped (fp32 / bf16: nothing kept)
                self.feedback.residual, self.mean.reduce_feedback = once.feedback.residual, once.reduce_feedback
            else:
                self.feedback.residual = torch.zeros_like(self.feedback.residual)
            return avg
        codec = BlockCodec(bits, self.codec.block)
        payload = codec.encode(self.feedback.residual)
        self.feedback.residual = self.feedback.residual - codec.decode(payload, self.numel)
        return torch.stack([codec.decode(p, self.numel) for p in self.wire.all_gather(payload)]).mean(dim=0)

    def state_dict(self) -> dict:
        """Error feedback matching Pending.sent: stage 1's after its encode, stage 2's from before an
        all-gather in flight (a resumed run re-sends the payload and reduces again)."""
        if self.mean is None:
            return {**self.feedback.state_dict(), "syncs": self.syncs}
        state = self.mean.state_dict()
        if self.held is not None:
            state["reduce_residual"] = self.held
        return {**state, "syncs": self.syncs}

    def load_state_dict(self, state: dict) -> None:
        """A checkpoint from before the reduce-scatter (its whole payload all-gathered) loads too: its
        residual is stage 1's, stage 2 starts empty, and a payload it had in flight is re-sent (in pieces
        from 3 ranks)."""
        (self.mean or self.feedback).load_state_dict(state)
        self.syncs = state.get("syncs", 0)
