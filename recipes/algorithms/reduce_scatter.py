"""A mean over a group by quantised reduce-scatter then all-gather, with error feedback at both stages.

The vector is cut into one piece per member (on block boundaries, so block scales stay whole):

    1. each member encodes its input (with error feedback) and sends piece i to member i
       (all-to-all: every piece but its own leaves it);
    2. member i decodes the copies of its piece, sums them in fp32, divides by the members and
       re-encodes the mean with error feedback of its own;
    3. the encoded means are all-gathered (its piece to every other member).

Together the members send 2(N-1) payloads, 2(N-1)/N of one each on average (a member sends one
payload and N-2 of its own piece: pieces differ by a block at most, so each is within N-2 blocks'
payload of the mean), where an all-gather of whole payloads sends N-1 each. Hierarchical DiLoCo runs it over its WAN groups
(recipes.algorithms.hierarchical), flat DiLoCo over the whole group from 3 ranks
(recipes.algorithms.exchange; at 2 both send one payload and the all-gather quantises once).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from recipes.compression import ErrorFeedback, block_codec
from recipes.telemetry import network_wait


class RawCodec:
    """fp32 / bf16 as a 'codec', so full precision takes the same reduce-scatter/all-gather path."""

    def __init__(self, bits: int) -> None:
        self.dtype = torch.float32 if bits == 32 else torch.bfloat16
        self.size = 4 if bits == 32 else 2

    def payload_bytes(self, numel: int) -> int:
        return numel * self.size

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x.detach().to(self.dtype).contiguous().view(torch.uint8)

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        return payload.view(self.dtype).float()

    def piece(self, payload: torch.Tensor, numel: int, start: int, stop: int) -> torch.Tensor:
        return payload[start * self.size:stop * self.size]


def cut(numel: int, parts: int, align: int) -> list[tuple[int, int]]:
    """`parts` contiguous ranges covering numel, cut on multiples of `align` (block scales stay whole)."""
    blocks = math.ceil(numel / align)
    edges = [min(numel, align * (blocks * p // parts)) for p in range(parts + 1)]
    return list(zip(edges, edges[1:]))


class QuantizedAllReduce:
    """Mean over a group by quantised reduce-scatter + all-gather, error feedback at both stages.

    `residual` is what this member's encodes of its input dropped (stage 1); `reduce_residual`
    what its re-encodes of the reduced piece it owns dropped (stage 2). For every round:
    sent + residual_after == input + residual_before (to fp32 rounding), at each stage.
    `wire` has world_size, me and exchange(send, recv_numel) (an all-to-all); calling the object
    runs all three steps, and scatter / reduce / assemble run them one at a time (overlap).
    """

    def __init__(self, numel: int, bits: int, block: int, wire, error_feedback: bool = True,
                 rotate: bool = False, seed: int = 0) -> None:
        self.numel, self.wire = numel, wire
        self.quantised = bits not in (32, 16)
        self.codec = block_codec(bits, block, rotate, seed) if self.quantised else RawCodec(bits)
        self.align = block if self.quantised else 1
        feedback = error_feedback and self.quantised
        self.feedback = ErrorFeedback(numel, enabled=feedback)
        self.reduce_feedback = ErrorFeedback(0, enabled=feedback)
        self.layout: tuple[int, int] | None = None  # (members, me) the pieces and reduce_residual are for
        self.pieces: list[tuple[int, int]] = []
        self.arrange(wire.world_size, wire.me)

    def arrange(self, members: int, me: int) -> None:
        """Cut the pieces for `members` with this one `me`. A group that changed (an elastic outer step's,
        a resumed run's) leaves the old piece's reduce_residual without an owner: it joins this member's
        own residual, times `members`, so the next mean carries it (nothing dropped is lost)."""
        if self.layout == (members, me):
            return
        if self.layout is not None:
            self.fold(members)
        self.layout, self.pieces = (members, me), cut(self.numel, members, self.align)
        a, b = self.pieces[me]
        self.reduce_feedback = ErrorFeedback(b - a, enabled=self.feedback.enabled)

    def fold(self, members: int) -> None:
        """Move stage 2's residual into stage 1's, times `members`: a mean over that many carries it."""
        held = self.reduce_feedback.residual
        if held is None or not held.any():
            return
        a, b = self.pieces[self.layout[1]]
        residual = self.feedback.residual.clone()  # not in place: a loaded state stays as it was
        residual[a:b] += members * held.to(residual.device)
        self.feedback.residual, self.reduce_feedback.residual = residual, torch.zeros_like(held)

    def payload_bytes(self) -> int:
        """One full payload of this vector (the unit the WAN targets are stated in)."""
        return self.codec.payload_bytes(self.numel)

    def on(self, device: torch.device) -> None:
        for fb in (self.feedback, self.reduce_feedback):
            if fb.residual is not None:
                fb.residual = fb.residual.to(device)

    def scatter(self, x: torch.Tensor) -> torch.Tensor:
        """Stage 1's encode: the whole payload (with error feedback), what a resumed run re-sends."""
        self.on(x.device)
        payload, _ = self.feedback.compress(x.detach().float().flatten(), self.codec)
        return payload

    def parts(self, payload: torch.Tensor) -> list[torch.Tensor]:
        """The whole payload cut into the members' pieces (piece i goes to member i)."""
        return [self.codec.piece(payload, self.numel, a, b) for a, b in self.pieces]

    def reduce(self, received: list[torch.Tensor]) -> torch.Tensor:
        """Stage 2: the mean of this member's piece as every member sent it, re-encoded."""
        a, b = self.pieces[self.layout[1]]
        mean = torch.stack([self.codec.decode(p, b - a) for p in received]).sum(dim=0) / len(received)
        payload, _ = self.reduce_feedback.compress(mean, self.codec)
        return payload

    def scatter_sizes(self) -> list[int]:
        """What this member receives in the reduce-scatter: its own piece, from every member."""
        a, b = self.pieces[self.layout[1]]
        return [self.codec.payload_bytes(b - a)] * len(self.pieces)

    def gather_sizes(self) -> list[int]:
        """What this member receives in the all-gather: every member's reduced piece."""
        return [self.codec.payload_bytes(b - a) for a, b in self.pieces]

    def assemble(self, gathered: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([self.codec.decode(p, b - a) for p, (a, b) in zip(gathered, self.pieces)])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.arrange(self.wire.world_size, self.wire.me)
        payload = self.scatter(x)
        if self.wire.world_size == 1:  # no one to send the mean to: what stage 1 decodes is the mean
            return self.codec.decode(payload, self.numel)
        received = self.wire.exchange(self.parts(payload), self.scatter_sizes())
        return self.assemble(self.wire.exchange([self.reduce(received)] * self.wire.world_size, self.gather_sizes()))

    def state_dict(self) -> dict:
        return {"residual": self.feedback.residual, "reduce_residual": self.reduce_feedback.residual,
                "reduce_layout": list(self.layout)}

    def load_state_dict(self, state: dict) -> None:
        """A state without reduce_residual (written before the flat exchange reduced) starts stage 2 empty;
        one written for another group is folded in by arrange()."""
        self.feedback.residual = state["residual"]
        held = state.get("reduce_residual")
        a, b = self.pieces[self.layout[1]]
        self.reduce_feedback = ErrorFeedback(b - a, enabled=self.feedback.enabled)
        if held is not None:
            self.reduce_feedback.residual = held
            self.layout = tuple(state.get("reduce_layout", self.layout))
            self.pieces = cut(self.numel, self.layout[0], self.align)


class FlatPeers:
    """A flat DiLoCo wire as the all-to-all the reduce-scatter needs (recipes.distributed.Wire has all-reduce
    and all-gather only): torchrun's whole group, striped over GEOTRAIN_WAN_STREAMS like its other collectives,
    or an elastic outer step's group (the wire's `pg`). Counted in the wire's bytes_sent at the start:
    every part but the one this member keeps."""

    def __init__(self, wire) -> None:
        self.wire = wire

    @property
    def world_size(self) -> int:
        return self.wire.world_size

    @property
    def me(self) -> int:
        pg = getattr(self.wire, "pg", None)
        if pg is not None:
            return pg.rank()
        return dist.get_rank() if self.wire.world_size > 1 and dist.is_initialized() else 0

    def exchange(self, send: list[torch.Tensor], recv_numel: list[int], async_op: bool = False):
        """Member i gets send[i]; what each member sent here, by member (with async_op, an InFlight)."""
        me = self.me
        self.wire.bytes_sent += sum(t.numel() * t.element_size() for i, t in enumerate(send) if i != me)
        groups = self._stripes(sum(t.numel() * t.element_size() for t in send))
        works, outs, splits = [], [], []
        for stripe, group in enumerate(groups):
            ins = [t.reshape(-1)[slice(*_share(t.numel(), stripe, len(groups)))] for t in send]
            split = [b - a for a, b in (_share(n, stripe, len(groups)) for n in recv_numel)]
            outs.append(send[0].new_empty(sum(split)))
            splits.append(split)
            works.append(self._all_to_all(outs[-1], torch.cat(ins), split, [t.numel() for t in ins], group))
        flight = InFlight(works, outs, splits)
        return flight if async_op else flight.parts()

    def _stripes(self, nbytes: int) -> list:
        streams = getattr(self.wire, "streams", None)
        return [None] if streams is None or nbytes < streams.min_bytes else streams.groups

    def _all_to_all(self, out, inp, out_split, in_split, group):
        pg = getattr(self.wire, "pg", None)
        if pg is not None:  # a bare ProcessGroupGloo (torch.distributed's functions want a registered group)
            return pg.alltoall_base(out, inp, out_split, in_split)
        return dist.all_to_all_single(out, inp, out_split, in_split, group=group, async_op=True)


def _share(n: int, stripe: int, stripes: int) -> tuple[int, int]:
    return n * stripe // stripes, n * (stripe + 1) // stripes


class InFlight:
    """An all-to-all on its way (one per stripe): parts() waits and gives what each member sent."""

    def __init__(self, works: list, outs: list[torch.Tensor], splits: list[list[int]]) -> None:
        self.works, self.outs, self.splits = works, outs, splits

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self.works)

    def parts(self) -> list[torch.Tensor]:
        with network_wait():
            for work in self.works:
                work.wait()
        stripes = [out.split(split) for out, split in zip(self.outs, self.splits)]
        return [torch.cat(column) if len(column) > 1 else column[0] for column in zip(*stripes)]
