"""DiLoCo: H inner AdamW steps, then an outer Nesterov step on the averaged pseudo-gradient.

The global weights and the outer momentum live on the CPU (off the accelerator),
as one flat fp32 vector each. pseudo-gradient = global - local. With `overlap`,
the exchange of outer step k is waited for only at outer step k+1, with eager updates
(Kale, Douillard and Donchev 2025): each rank goes on from an outer step that takes its own fresh
pseudo-gradient for its share of the average (1/M) and the rest from the average landed one step
late. The shared global weights replay the mean of those steps once the average is in, so every
rank holds the same global weights and the ranks end equal. (The replay is exact for full-precision
exchanges; with quantised ones a rank's eager step used its raw pseudo-gradient, the average holds
what was sent, and error feedback sends the rest later.)
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from recipes.algorithms.exchange import Pending


def nesterov_outer_step(global_flat: torch.Tensor, momentum: torch.Tensor, avg_delta: torch.Tensor,
                        lr: float, mu: float, look_ahead: bool = True) -> None:
    """PyTorch SGD(nesterov=True) semantics, in place: m = mu m + g; w -= lr (g + mu m).
    Without `look_ahead` (a run's last sync) the momentum is updated the same and w -= lr g."""
    momentum.mul_(mu).add_(avg_delta)
    global_flat.sub_(avg_delta.add(momentum, alpha=mu) if look_ahead else avg_delta, alpha=lr)


class DiLoCo:
    """Outer loop around any inner optimizer; `exchange` decides what crosses the wire."""

    name = "diloco"
    fragments = 1  # the model syncs whole (Streaming DiLoCo: in fragments)

    def __init__(self, model: torch.nn.Module, exchange, *, inner_steps: int, outer_lr: float,
                 outer_momentum: float, overlap: bool = False, outer_update=None, flush_bits: int = 0,
                 final_step: int | None = None, overlap_momentum: float | None = None) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.exchange = exchange
        self.inner_steps = inner_steps
        # with `overlap` the outer momentum may differ (the presets' overlap_momentum): a step that lands one
        # phase late pushes on with the momentum of phases the workers have already trained past
        self.plain_momentum = outer_momentum
        self.overlap_momentum = outer_momentum if overlap_momentum is None else overlap_momentum
        self.outer_lr = outer_lr
        self.overlap = overlap
        self.flush_bits = flush_bits
        self.outer_update = outer_update or self._nesterov
        self.global_flat = self._local_flat().cpu()
        self.anchor = self.global_flat.clone()  # where this phase's inner steps started
        self.momentum = torch.zeros_like(self.global_flat)
        self.pending: Pending | None = None
        # overlap: this rank's share of the averaged pseudo-gradient, and what the shared global weights
        # still owe of the latest landed average (the part the eager step took from this rank's own delta)
        self.share = 1.0 / exchange.wire.world_size
        self.owed = torch.zeros_like(self.global_flat)
        self.outer_step = 0
        # the run's last step: when a multiple of H, its sync is the run's last (a last partial
        # phase is synced by finish()); either takes no look-ahead (with `overlap`, the landing in finish())
        self.final_step = final_step
        self.ending_at: int | None = None  # the step whose sync is the run's last, while it runs
        self.withheld_at: int | None = None  # the step whose last sync withheld the look-ahead
        self.withheld_scale = 0.0  # outer lr x momentum of that sync: the look-ahead is scale x momentum

    def after_backward(self) -> None:
        """Inner steps are purely local."""

    @property
    def outer_momentum(self) -> float:
        return self.overlap_momentum if self.overlap else self.plain_momentum

    def stop_overlap(self) -> None:
        """Wait for every exchange from now on (elastic mode), with the outer momentum of plain DiLoCo."""
        self.overlap = False

    @contextmanager
    def _ending_at(self, step: int | None):
        """While inside, the outer update takes `step` as the run's last sync (None: an ordinary one)."""
        before, self.ending_at = self.ending_at, step
        try:
            yield
        finally:
            self.ending_at = before

    def after_optimizer_step(self, step: int) -> bool:
        """Run the outer step after every H-th inner step; True when one ran. The sync at `final_step`
        (the run's last step, when it ends on a whole phase) is the run's last: no look-ahead
        (with `overlap` its exchange lands in finish(), the run's last outer step)."""
        if self.pending is not None and step % self.inner_steps == self.inner_steps // 2:
            self._progress()
        if step % self.inner_steps:
            return False
        self._sync(step, last=step == self.final_step)
        return True

    def _progress(self) -> None:
        """Halfway through a phase, an exchange in two stages starts its second (the all-gather after
        the reduce-scatter): at the same step on every rank, so collectives start in one order."""
        progress = getattr(self.exchange, "progress", None)
        if progress is not None:
            progress(self.pending)

    def _sync(self, step: int, last: bool) -> None:
        with self._ending_at(step if last and not self.overlap else None):
            self.sync()

    def sync(self) -> None:
        local = self._local_flat()
        delta = self.anchor.to(local.device) - local
        if not self.overlap:
            with self._ending_at(None):  # an ordinary step: this sync's own comes after it
                self._land()  # an exchange left in flight by an overlapped run resumed without overlap
            avg = self.exchange.finish(self.exchange.start(delta))
            self.outer_update(avg.cpu())
            self._write_params(self.global_flat)
            self.anchor = self.global_flat.clone()
        else:
            if self.pending is not None:  # the previous sync's average: replay the mean of the ranks' eager steps
                landed = self.exchange.finish(self.pending).cpu()  # (landed before the next starts: one order
                self.outer_update(self._eager_input(landed))      # of collectives on every rank)
                self.owed = landed
            self.pending = self.exchange.start(delta, async_op=True)
            eager = self._tentative(self._eager_input(delta.cpu()))
            self._write_params(eager)
            self.anchor = eager
        self.outer_step += 1

    def finish(self, step: int) -> None:
        """Sync the last partial phase, land an exchange in flight, optionally flush EF: ranks end equal.
        The run's last outer step has no momentum look-ahead: training ends there, and the look-ahead
        would push the final weights on along earlier phases' direction. That holds for a last partial
        phase (synced here) and for a run that ends on a whole phase (`final_step`, synced by
        after_optimizer_step). Measured on the text bench: 1.8287 -> 1.8176 and 1.9061 -> 1.8982 for
        H=32 1-bit ending 8 steps into a phase; H=40 ending on a whole phase at 1800 steps, seeds 0-3,
        1.8060 -> 1.7936, 1.8116 -> 1.8041, 1.8687 -> 1.8633, 1.8580 -> 1.8468.
        The momentum still takes the last pseudo-gradient and the withheld look-ahead is remembered
        (`withheld_at`): a run resumed with more steps applies it first (load_state_dict), so it goes
        on from where an ordinary sync would have left it (exactly so after a whole phase and without
        `flush_bits`; a partial phase's sync has happened). A worker that joined after the last sync
        (elastic: it has the others' `withheld_at`) does not sync again. With `overlap` the last
        exchange lands here, with what the shared weights still owe of the one before, as the run's
        last outer step (no look-ahead); Streaming DiLoCo's last fragment syncs are plain averages (lr 1)."""
        if step % self.inner_steps and self.withheld_at != step:
            self._sync(step, last=True)
        with self._ending_at(step):  # an exchange in flight lands as the run's last outer step
            self._land()
        residual = self.exchange.flush(self.flush_bits) if self.flush_bits and hasattr(self.exchange, "flush") else None
        if residual is not None:  # a plain outer SGD step: the residual is progress that was never applied
            self.global_flat.sub_(residual.cpu(), alpha=self.outer_lr)
        self._write_params(self.global_flat)
        self.anchor = self.global_flat.clone()

    def _nesterov(self, avg_delta: torch.Tensor) -> None:
        # the run's last sync takes no look-ahead past the end; an ordinary one leaves nothing owed
        nesterov_outer_step(self.global_flat, self.momentum, avg_delta, self.outer_lr, self.outer_momentum,
                            look_ahead=self.ending_at is None)
        self.withheld_at, self.withheld_scale = self.ending_at, self.outer_lr * self.outer_momentum

    def _land(self) -> None:
        """The exchange in flight, with what the shared weights still owe of the one before, in one
        outer step; nothing is owed after it."""
        if self.pending is not None:
            self.outer_update(self.owed.mul(1 - self.share).add(self.exchange.finish(self.pending).cpu()))
            self.pending = None
            self.owed = torch.zeros_like(self.global_flat)

    def _eager_input(self, fresh: torch.Tensor) -> torch.Tensor:
        """The outer step's input with overlap: (1 - 1/M) x the average landed one sync late, plus 1/M x
        `fresh` (this rank's own pseudo-gradient for its eager step; the landed average for the replay)."""
        return self.owed.mul(1 - self.share).add(fresh, alpha=self.share)

    def _tentative(self, step_in: torch.Tensor) -> torch.Tensor:
        """The weights one outer step on from the shared state, leaving the shared state as it is."""
        kept = self.global_flat, self.momentum
        self.global_flat, self.momentum = self.global_flat.clone(), self.momentum.clone()
        try:
            self.outer_update(step_in)
            return self.global_flat
        finally:
            self.global_flat, self.momentum = kept

    def _apply_withheld(self) -> None:
        """A run that ended here goes on (resumed with more steps): take the look-ahead its last sync
        withheld, so the weights are where an ordinary sync would have left them."""
        self.global_flat = self.global_flat - self.withheld_scale * self.momentum  # not in place: a loaded state stays as it was
        self.anchor = self.global_flat.clone()
        self._write_params(self.global_flat)
        self.withheld_at = None

    @torch.no_grad()
    def _local_flat(self) -> torch.Tensor:
        return torch.cat([p.detach().float().flatten() for p in self.params])

    @torch.no_grad()
    def _write_params(self, flat: torch.Tensor) -> None:
        offset = 0
        for p in self.params:
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p).to(p.device, p.dtype))
            offset += n

    def state_dict(self) -> dict:
        return {"global": self.global_flat, "anchor": self.anchor, "momentum": self.momentum,
                "outer_step": self.outer_step, "exchange": self.exchange.state_dict(),
                "withheld_at": self.withheld_at, "withheld_scale": self.withheld_scale,
                "pending_sent": None if self.pending is None else self.pending.sent.cpu(), "owed": self.owed}

    def load_state_dict(self, state: dict) -> None:
        self.global_flat, self.anchor = state["global"], state["anchor"]
        self.momentum, self.outer_step = state["momentum"], state["outer_step"]
        self.exchange.load_state_dict(state["exchange"])
        sent = state.get("pending_sent")
        device = self.params[0].device
        self.pending = None if sent is None else self.exchange.reissue(sent.to(device), async_op=True)
        self.owed = state.get("owed", torch.zeros_like(self.global_flat))
        self.withheld_at, self.withheld_scale = state.get("withheld_at"), state.get("withheld_scale", 0.0)
        if self.withheld_at is not None and (self.final_step is None or self.final_step > self.withheld_at):
            self._apply_withheld()  # the run goes on; the model's weights were loaded before this
