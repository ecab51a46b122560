"""Streaming DiLoCo: the model in F fragments that synchronise on staggered schedules.

Fragment f (contiguous parameters, about 1/F of the values each) runs its own outer
step every H inner steps, at the steps s with s % H == f * H // F. Each exchange is
then 1/F of the model, so the link carries a steady trickle instead of one burst
every H steps; the bytes per H steps are the same as plain DiLoCo's. Each fragment
has its own slice of the global weights, of the outer momentum and its own exchange
(error feedback included). At the end every fragment syncs its remaining progress,
so all ranks finish with the same weights. Those last syncs land on the ranks' plain average: outer lr 1
and no momentum look-ahead (plain DiLoCo's last sync drops the look-ahead too: recipes.algorithms.diloco).
On the text bench, `ultra` (H=205, 2 fragments, 1-bit without error feedback, outer lr 1.2) at 1.5x
DDP's steps ended at 1.7368, 1.7412, 1.7354, 1.7350 (seeds 0-3) with look-ahead and lr 1.2 at the end,
1.7295, 1.7340, 1.7268, 1.7308 without the look-ahead, 1.7275, 1.7322, 1.7254, 1.7297 on the plain
average. A run resumed past its end goes on from those averaged weights.
"""

from __future__ import annotations

import torch

from recipes.algorithms.diloco import DiLoCo, nesterov_outer_step


def fragment_bounds(sizes: list[int], fragments: int) -> list[tuple[int, int]]:
    """Split parameters (numel each, in order) into `fragments` contiguous flat ranges of about
    equal size, cut only at parameter boundaries; fewer ranges when there are fewer parameters."""
    total = sum(sizes)
    fragments = max(1, min(fragments, len(sizes)))
    bounds, start, offset, f = [], 0, 0, 1
    for i, n in enumerate(sizes):
        offset += n
        left_params, left_frags = len(sizes) - i - 1, fragments - f
        if f < fragments and (offset >= total * f / fragments or left_params == left_frags):
            bounds.append((start, offset))
            start, f = offset, f + 1
    bounds.append((start, total))
    return bounds


def saved_fragments(state: dict) -> int:
    """How many fragments a DiLoCo-family state_dict was written in (1: the model whole)."""
    return len(state["last_sync"]) if "last_sync" in state else 1


def sync_offsets(inner_steps: int, fragments: int) -> list[int]:
    """The residue of the step (mod H) at which each fragment syncs: f * H // F."""
    return [f * inner_steps // fragments for f in range(fragments)]


class StreamingDiLoCo(DiLoCo):
    """DiLoCo whose outer step runs per fragment; `make_exchange(numel)` builds each fragment's exchange."""

    name = "streaming-diloco"

    def __init__(self, model: torch.nn.Module, make_exchange, *, fragments: int, inner_steps: int,
                 outer_lr: float, outer_momentum: float, flush_bits: int = 0, final_step: int | None = None) -> None:
        params = [p for p in model.parameters() if p.requires_grad]
        self.bounds = fragment_bounds([p.numel() for p in params], fragments)
        self.exchanges = [make_exchange(hi - lo) for lo, hi in self.bounds]
        super().__init__(model, self.exchanges[0], inner_steps=inner_steps, outer_lr=outer_lr,
                         outer_momentum=outer_momentum, overlap=False, flush_bits=flush_bits,
                         final_step=final_step)
        self.fragments = len(self.bounds)
        self.offsets = sync_offsets(inner_steps, self.fragments)
        self.last_sync = [0] * self.fragments  # inner step of each fragment's latest sync

    def due(self, step: int) -> list[int]:
        """The fragments whose outer step runs after inner step `step`."""
        return [f for f, off in enumerate(self.offsets) if step > 0 and step % self.inner_steps == off]

    def after_optimizer_step(self, step: int) -> bool:
        due = self.due(step)
        for f in due:  # a sync at the run's last step is that fragment's last (finish() then skips it)
            self.sync_fragment(f, -step if step == self.final_step else step)
        return bool(due)

    def sync_fragment(self, f: int, step: int) -> None:
        lo, hi = self.bounds[f]
        local = self._local_flat()[lo:hi]
        delta = self.anchor[lo:hi].to(local.device) - local
        exchange = self.exchanges[f]
        avg = exchange.finish(exchange.start(delta)).cpu()
        final = step < 0  # finish() passes -step: the run's last sync of this fragment
        # the last sync lands on the ranks' plain average (outer lr 1, no look-ahead): extrapolating past it
        # bets on progress the run never makes (module docstring; measured on the text bench)
        lr = 1.0 if final else self.outer_lr
        nesterov_outer_step(self.global_flat[lo:hi], self.momentum[lo:hi], avg, lr, self.outer_momentum,
                            look_ahead=not final)
        flush = exchange.flush(self.flush_bits) if final and self.flush_bits and hasattr(exchange, "flush") else None
        if flush is not None:
            self.global_flat[lo:hi].sub_(flush.cpu(), alpha=lr)
        self.anchor[lo:hi] = self.global_flat[lo:hi]
        self._write_slice(lo, hi)
        self.last_sync[f] = abs(step)
        if f == 0:
            self.outer_step += 1

    def sync(self) -> None:
        raise RuntimeError("Streaming DiLoCo syncs per fragment (sync_fragment)")

    def finish(self, step: int) -> None:
        """Every fragment with progress since its last sync syncs it now: ranks end equal."""
        for f in range(len(self.bounds)):
            if self.last_sync[f] != step or (self.flush_bits and step != self.final_step):  # final_step's flushed
                self.sync_fragment(f, -step)
        self._write_params(self.global_flat)

    @torch.no_grad()
    def _write_slice(self, lo: int, hi: int) -> None:
        offset = 0
        for p in self.params:
            n = p.numel()
            a, b = max(lo, offset), min(hi, offset + n)
            if a < b:
                p.view(-1)[a - offset:b - offset].copy_(self.global_flat[a:b].to(p.device, p.dtype))
            offset += n

    def state_dict(self) -> dict:
        return {"global": self.global_flat, "anchor": self.anchor, "momentum": self.momentum,
                "outer_step": self.outer_step, "last_sync": list(self.last_sync),
                "exchanges": [e.state_dict() for e in self.exchanges]}

    def load_state_dict(self, state: dict) -> None:
        self.global_flat, self.anchor = state["global"], state["anchor"]
        self.momentum, self.outer_step = state["momentum"], state["outer_step"]
        self.last_sync = list(state["last_sync"])
        for exchange, s in zip(self.exchanges, state["exchanges"]):
            exchange.load_state_dict(s)
