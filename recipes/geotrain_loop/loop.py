"""`Loop`: geotrain's DiLoCo, Streaming DiLoCo and hierarchical DiLoCo around a model and inner
optimizer that geotrain did not build, one call per step.

    loop = geotrain_loop.Loop(model, optimizer, "medium", steps=1000)
    for batch in batches:
        model(**batch).loss.backward()
        loop.step()          # the inner step, and every H steps the preset's compressed outer sync
    loop.finish()            # the last partial phase: every rank ends with the same weights
    print(loop.bytes_sent)   # what this rank sent, counted as the catalog recipes count it

The same algorithm objects as `python -m recipes.train` (recipes.algorithms.build_algorithm), the
same preset table and config keys, so bytes and updates match a catalog run step for step.
"""

from __future__ import annotations

import atexit
import os
import time
from datetime import timedelta
from pathlib import Path

import torch

from geotrain_loop._private_recipes import load

_config = load("config")
_distributed = load("distributed")
_algorithms = load("algorithms")
_hierarchical = load("algorithms.hierarchical")
_topology = load("topology")
_telemetry = load("telemetry")

OUT_DIR_ENV = "GEOTRAIN_OUT_DIR"  # set by a custom-training workspace: where metrics.jsonl goes
PRESET_ENV = "GEOTRAIN_PRESET"  # set by a custom-training workspace: its --gradient-compression
# The config sections the loop reads; the rest (model, size, data, checkpoint) describe a catalog run.
SECTIONS = {"gradient_compression", "algorithm", "steps", "datacenters", "seed", "out_dir", "diloco", "demo",
            "dist", "logging"}
OPTIM_KEYS = {"betas", "name", "grad_clip"}  # the preset's outer lr and H follow the inner Adam's beta1
PLACEHOLDER = {"model": "gpt-neo", "size": "tiny"}  # a valid catalog entry for the checks; never built


class LoopConfigError(ValueError):
    """A config the loop cannot run: one line saying what to change."""


def _nested(keys: dict) -> dict:
    """{"diloco.overlap": True, "demo": {...}} -> nested sections."""
    out: dict = {}
    for key, value in keys.items():
        node, parts = out, str(key).split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise LoopConfigError(f"config key {key!r} sets inside {part!r}, which is not a section")
        if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(value)
        else:
            node[parts[-1]] = value
    return out


def _betas(optimizer: torch.optim.Optimizer) -> list[float] | None:
    betas = optimizer.param_groups[0].get("betas") if optimizer.param_groups else None
    return [float(b) for b in betas] if isinstance(betas, (tuple, list)) and len(betas) == 2 else None


def build_config(preset: str, keys: dict, steps: int | None, optimizer: torch.optim.Optimizer):
    """A checked recipes TrainConfig from a preset name and catalog config keys (dotted or nested)."""
    given = _nested(keys)
    unknown = sorted(set(given) - SECTIONS - {"optim"})
    if unknown:
        raise LoopConfigError(f"config key {unknown[0]!r} describes a catalog run, not your loop: geotrain_loop "
                              f"reads {', '.join(sorted(SECTIONS | {'optim'}))}")
    optim = dict(given.pop("optim", {}) or {})
    if set(optim) - OPTIM_KEYS:
        raise LoopConfigError(f"optim.{sorted(set(optim) - OPTIM_KEYS)[0]} is your optimizer's own: geotrain_loop "
                              f"reads only optim.{', optim.'.join(sorted(OPTIM_KEYS))}")
    if "betas" not in optim and _betas(optimizer) is not None:
        optim["betas"] = _betas(optimizer)
    data = {**PLACEHOLDER, "gradient_compression": preset, "optim": optim,
            "logging": {"wandb": bool(os.environ.get("WANDB_API_KEY"))}, **given}
    if steps is not None:
        data["steps"] = steps
    try:
        return _config.parse_config(data)
    except _config.ConfigError as exc:
        first = exc.errors[0]
        raise LoopConfigError(f"config {first['path']}: {first['message']}") from None


def join(dist_keys: dict | None = None, device: str = "auto"):
    """Join the workers' process group from the environment geotrain (or torchrun) set: on a local
    workspace a FileStore in the run's private directory, in a pod torchrun's agent store; a group the
    script already made is used as it is. Returns who this process is (rank, world_size, device)."""
    schema = load("schema")
    # the group goes down before the interpreter does: left to exit, gloo's threads can abort the process
    # ("terminate called without an active exception") after the script's last line, seen under load
    atexit.register(_leave)
    return _distributed.setup(schema.DistConfig(**(dist_keys or {})), device)


def _leave() -> None:
    """At exit: meet the other ranks first (bounded: a rank that died is not waited for past 30 s), so
    no rank takes the group down while a peer's gloo threads still talk to it (an abort at exit, seen
    once on a loaded CI machine after the first teardown fix), then take it down."""
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() > 1 and dist.get_backend() == "gloo":
        try:
            dist.monitored_barrier(timeout=timedelta(seconds=30))
        except RuntimeError:
            pass  # a peer is gone: nothing to wait for
    _distributed.teardown()


class Loop:
    """Wraps a model and its inner optimizer; call step() after each backward, finish() at the end."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, preset: str | None = None, *,
                 steps: int | None = None, config: dict | None = None, scheduler=None,
                 out_dir: str | os.PathLike | None = None, log_every: int | None = None) -> None:
        """`preset`: a name from recipes/presets.yaml (default: GEOTRAIN_PRESET, which a custom-training
        workspace sets to its --gradient-compression, else medium). `log_every` steps between progress lines
        and metrics (default logging.log_every; 0: only log())."""
        preset = preset or os.environ.get(PRESET_ENV) or "medium"
        self.cfg = build_config(preset, config or {}, steps, optimizer)
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.total = steps
        self.comp = _config.resolve_compression(self.cfg)
        self.rt = join(self.cfg.dist.model_dump(), self.cfg.device)
        self._same_start()
        self.wire = _distributed.Wire(self.rt.world_size)
        self.lan = self._datacenters()
        self.algo = _algorithms.build_algorithm(model, self.comp, self.cfg, self.wire, self.lan)
        if hasattr(self.algo, "final_step"):
            self.algo.final_step = steps  # unknown: no sync is taken for the run's last
        self.step_count = 0
        # clipped only when asked: your loop may clip itself (the catalog's default is optim.grad_clip 1.0)
        self.grad_clip = self.cfg.optim.grad_clip if "grad_clip" in (_nested(config or {}).get("optim") or {}) else 0.0
        self.log_every = self.cfg.logging.log_every if log_every is None else log_every
        self._losses: list[float] = []
        self._window = time.perf_counter()
        given = _nested(config or {})
        chosen = out_dir or given.get("out_dir") or os.environ.get(OUT_DIR_ENV)
        self.out_dir = Path(chosen).resolve() if chosen else None  # metrics.jsonl (rank 0) goes there
        self.telemetry = self._telemetry() if chosen else None
        _telemetry.say(self.rt.rank, f"geotrain_loop: preset {self.comp.preset} ({self.comp.algorithm}, "
                                     f"H={self.comp.inner_steps}, {self.comp.bits} bits), {self.rt.world_size} "
                                     f"worker(s), {sum(p.numel() for p in self.algo.params):,} params synced")

    def _telemetry(self):
        name = self.cfg.logging.run_name or f"custom-{self.comp.preset}"
        return _telemetry.Telemetry(rank=self.rt.rank, out_dir=self.out_dir, config=_config.config_to_dict(self.cfg),
                                    wandb_on=self.cfg.logging.wandb, project=self.cfg.logging.wandb_project,
                                    entity=self.cfg.logging.wandb_entity, run_name=name,
                                    wandb_init_timeout=self.cfg.logging.wandb_init_timeout)

    @torch.no_grad()
    def _same_start(self) -> None:
        """Every rank starts from rank 0's weights (a setup broadcast, not counted as training traffic):
        DiLoCo's shared global weights begin as each rank's own."""
        if self.rt.distributed and self.rt.world_size > 1:
            for p in self.model.parameters():
                torch.distributed.broadcast(p.data, src=0)

    def _datacenters(self):
        place = _topology.resolve(self.rt.rank, self.rt.world_size, self.cfg.datacenters)
        if not place.hierarchical or self.comp.algorithm == "ddp":
            return None
        if not self.rt.distributed:
            raise LoopConfigError("datacenters > 1 needs a process group of several workers")
        lan, self.wire, _twin = _hierarchical.groups(place, overlap=self.cfg.diloco.overlap)
        return lan

    # one step -------------------------------------------------------------------------------
    def after_backward(self) -> None:
        """DDP presets average the gradients here; DiLoCo's inner steps are local."""
        self.algo.after_backward()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)

    def after_optimizer_step(self, loss: float | torch.Tensor | None = None) -> bool:
        """Count the step; every H steps the outer sync runs. True when one ran."""
        self.step_count += 1
        synced = self.algo.after_optimizer_step(self.step_count)
        if loss is not None:
            self._losses.append(float(loss.detach() if torch.is_tensor(loss) else loss))
        if self.log_every and (self.step_count % self.log_every == 0 or self.step_count == self.total):
            self._log()
        return synced

    def log(self, loss: float | torch.Tensor | None = None) -> None:
        """A progress line and a metrics record now (with `loss` if given): for loops that log themselves."""
        if loss is not None:
            self._losses.append(float(loss.detach() if torch.is_tensor(loss) else loss))
        self._log()

    def step(self, loss: float | torch.Tensor | None = None) -> bool:
        """After loss.backward(): the inner optimizer step (and scheduler), zero_grad, and the outer sync
        when one is due. Pass the loss to have it logged with the bytes."""
        self.after_backward()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return self.after_optimizer_step(loss)

    def finish(self) -> None:
        """Sync the last partial phase and land anything in flight: every rank holds the same weights."""
        self.algo.finish(self.step_count)
        if self._losses or not self.log_every or self.step_count % self.log_every:
            self._log()
        if self.telemetry is not None:
            self.telemetry.close()

    # what crossed the wire ------------------------------------------------------------------
    @property
    def bytes_sent(self) -> int:
        """Bytes this rank sent (between datacenters, when hierarchical)."""
        return self.wire.bytes_sent

    @property
    def lan_bytes(self) -> int:
        return self.lan.bytes_sent if self.lan is not None else 0

    @property
    def outer_step(self) -> int:
        return self.algo.outer_step

    def _log(self) -> None:
        elapsed = time.perf_counter() - self._window
        n = max(1, len(self._losses))
        record = {"step": self.step_count, "bytes_sent": self.bytes_sent, "outer_step": self.outer_step,
                  "step_time": elapsed / n, "items": self.step_count * self.rt.world_size}
        if self.lan is not None:
            record["lan_bytes"] = self.lan_bytes
        if self._losses:
            record["loss"] = sum(self._losses) / len(self._losses)
        groups = getattr(self.optimizer, "param_groups", None) or [{}]
        lr = self.scheduler.get_last_lr()[0] if self.scheduler is not None else groups[0].get("lr")
        if isinstance(lr, (int, float)):
            record["lr"] = float(lr)
        # recipes.train's progress line, which the Kubernetes backend reads curves from (core.kubernetes.pod_logs)
        said = f"step {self.step_count}/{self.total or self.step_count}"
        if "loss" in record:
            said += f" loss {record['loss']:.4f}" + (f" lr {record['lr']:.2e}" if "lr" in record else "")
        said += f" outer {self.outer_step} sent {self.bytes_sent / 1e6:.3f}MB {1000 * record['step_time']:.1f}ms/step"
        _telemetry.say(self.rt.rank, said)
        if self.telemetry is not None:
            self.telemetry.log(record)
        self._losses, self._window = [], time.perf_counter()

    def state_dict(self) -> dict:
        """The outer loop's state (global weights, momentum, error feedback) for your checkpoint."""
        return {"step": self.step_count, "bytes_sent": self.bytes_sent, "algorithm": self.algo.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.step_count, self.wire.bytes_sent = state["step"], state["bytes_sent"]
        self.algo.load_state_dict(state["algorithm"])
