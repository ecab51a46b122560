"""geotrain's DiLoCo in an unmodified Hugging Face `Trainer` script, with one line before it builds
its TrainingArguments:

    geotrain_loop.huggingface("medium")

The line joins the workers' process group from geotrain's environment (accelerate, which the
Trainer runs on, then uses that group instead of starting a TCP store of its own) and adds a
`GeotrainCallback` to every Trainer the script builds (transformers.trainer.DEFAULT_CALLBACKS).
Where the script already has a group (torchrun), `Trainer(..., callbacks=[GeotrainCallback("medium")])`
does the same.

The Trainer wraps the model in DistributedDataParallel on several workers; the callback stops that
wrapper's gradient all-reduce (DDP's own `no_sync` switch, held off) so the inner steps are local and
the preset's outer sync is the only traffic, counted as the catalog recipes count it.
"""

from __future__ import annotations

import gc

import torch
from transformers import TrainerCallback

from geotrain_loop.loop import Loop, join


class GeotrainCallback(TrainerCallback):
    """The Loop's hooks at the Trainer's events: inner steps local, the preset's sync every H steps."""

    def __init__(self, preset: str = "medium", config: dict | None = None) -> None:
        self.preset, self.config = preset, config or {}
        self.loop: Loop | None = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        for wrapper in _ddp_wrappers(model):
            # DDP reads these before each forward; its no_sync() restores what it found, so they stay off
            wrapper.require_backward_grad_sync = False
            wrapper.require_forward_param_sync = False
        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps the optimizer
        self.loop = Loop(model, inner, self.preset, steps=state.max_steps or None, config=self.config, log_every=0)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.loop.after_backward()  # DDP presets: geotrain's counted all-reduce of the gradients

    def on_step_end(self, args, state, control, **kwargs):
        self.loop.after_optimizer_step()

    def on_log(self, args, state, control, logs=None, **kwargs):
        """The Trainer's logging steps: its loss with the loop's bytes and outer steps (metrics.jsonl)."""
        if self.loop is not None and logs and "loss" in logs:
            self.loop.log(logs["loss"])

    def on_train_end(self, args, state, control, **kwargs):
        if self.loop is not None:
            self.loop.finish()

    @property
    def bytes_sent(self) -> int:
        return self.loop.bytes_sent if self.loop is not None else 0


def _ddp_wrappers(model: torch.nn.Module) -> list[torch.nn.parallel.DistributedDataParallel]:
    """The DistributedDataParallel objects around `model` (the Trainer keeps its wrapper to itself)."""
    return [obj for obj in gc.get_objects()
            if isinstance(obj, torch.nn.parallel.DistributedDataParallel) and obj.module is model]


def huggingface(preset: str = "medium", config: dict | None = None) -> GeotrainCallback:
    """Join the group and add the callback to every Trainer built from now on; returns the callback."""
    from transformers import trainer

    join((config or {}).get("dist"))
    callback = GeotrainCallback(preset, config)
    trainer.DEFAULT_CALLBACKS.append(callback)
    return callback
