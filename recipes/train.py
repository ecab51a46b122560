"""The training entry point: one readable loop for every model, algorithm and preset.

    torchrun --nproc-per-node 2 -m recipes.train --config recipes/configs/gpt-neo/tiny.yaml
    python -m recipes.train --config recipes/configs/gpt-neo/tiny.yaml steps=50 gradient_compression=high

Every rank prints progress lines; rank 0 appends to <out_dir>/metrics.jsonl, logs
to W&B and uploads checkpoints. Checkpoints are resumed automatically, so
`torchrun --max-restarts N` continues a killed run instead of starting over.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import typing
from pathlib import Path

import torch

from recipes import checkpoint, elastic, topology
from recipes.algorithms import hierarchical
from recipes.algorithms import build_algorithm
from recipes.algorithms.diloco import DiLoCo
from recipes.algorithms.streaming import saved_fragments
from recipes.checkpoint_store import CheckpointRefused, CheckpointStore, HubMirror, warn
from recipes.config import ConfigError, config_to_dict, load_config, resolve_compression
from recipes.schema import OptimConfig, TrainConfig
from recipes.data import build_data
from recipes.distributed import Runtime, Wire, setup, teardown
from recipes.models import build_model, count_parameters
from recipes.optimizers import build_optimizer
from recipes.telemetry import Telemetry, Utilization, say


def lr_lambda(cfg: TrainConfig):
    """Linear warmup, then cosine down to min_lr_ratio (or constant)."""
    o = cfg.optim

    def factor(step: int) -> float:
        if step < o.warmup_steps:
            return (step + 1) / o.warmup_steps
        if o.schedule == "constant":
            return 1.0
        progress = (step - o.warmup_steps) / max(1, (o.schedule_steps or cfg.steps) - o.warmup_steps)
        return o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


class ResumeError(RuntimeError):
    """The newest checkpoint cannot be resumed under this config (the message says what to change)."""


START_OVER = "or start over in a new out_dir (with a new checkpoint.hf_repo if one is set)"  # a refused resume


def _optimizer_of(state: dict) -> str | None:
    """The inner optimizer a checkpoint was written with (adamw before optim.name existed); None if
    its config is not what a checkpoint holds."""
    config = state.get("config")
    optim = config.get("optim") if isinstance(config, dict) else None
    name = optim.get("name", "adamw") if isinstance(optim, dict) else None
    return name if name in typing.get_args(OptimConfig.model_fields["name"].annotation) else None


class Trainer:
    """Holds the run's pieces so that checkpointing and the loop read plainly."""

    def __init__(self, cfg: TrainConfig, rt: Runtime) -> None:
        self.cfg, self.rt = cfg, rt
        self.comp = resolve_compression(cfg)
        self.out_dir = Path(cfg.out_dir).resolve()
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        self.model, self.loss_fn = build_model(cfg.model, cfg.size)
        self.model.to(rt.device)
        torch.manual_seed(cfg.seed + 1 + rt.rank)  # dropout and masks differ per rank
        self.data = build_data(cfg, rt.rank, rt.world_size, self.out_dir)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(cfg))
        self.membership = elastic.from_env(rt.rank, rt.world_size, self.comp.algorithm)
        self.wire = self.membership.wire if self.membership else Wire(rt.world_size)
        self.lan = self._datacenters()  # hierarchical DiLoCo: self.wire then counts the WAN only
        self.algo = build_algorithm(self.model, self.comp, cfg, self.wire, self.lan, elastic=self.membership is not None)
        self.step = 0
        self.items = 0
        self.finished = False  # the end-of-training sync ran (a restart after the end must not repeat it)
        self.checkpoints = CheckpointStore(self.out_dir, rt.rank, cfg.checkpoint.keep)
        self.resumed_from: int | None = None
        if self.membership:
            self.membership.attach(self)

    def _datacenters(self) -> Wire | None:
        """The LAN wire when the workers form several datacenters (and the WAN one becomes self.wire)."""
        if self.membership is not None:  # the elastic pool groups by GEOTRAIN_DATACENTER itself (recipes.elastic)
            return None
        place = topology.resolve(self.rt.rank, self.rt.world_size, self.cfg.datacenters)
        if not place.hierarchical or self.comp.algorithm == "ddp":
            return None
        if not self.rt.distributed:
            raise topology.TopologyError("hierarchical DiLoCo needs one torchrun group (not the elastic pool)")
        say(self.rt.rank, f"hierarchical DiLoCo: {place.describe()}"
                          + (" (overlapped exchange)" if self.cfg.diloco.overlap else ""))
        lan, self.wire, _twin = hierarchical.groups(place, overlap=self.cfg.diloco.overlap)
        return lan

    def wire_bytes(self) -> dict:
        """Bytes this rank sent: over the WAN (`bytes_sent`) and, hierarchical, inside its datacenter."""
        out = {"bytes_sent": self.wire.bytes_sent}
        if self.lan is not None:
            out["lan_bytes"] = self.lan.bytes_sent
        elif getattr(self.wire, "lan_bytes", 0):  # elastic across datacenters (recipes.elastic_groups)
            out["lan_bytes"] = self.wire.lan_bytes
        return out

    def _check_fragments(self, state: dict) -> None:
        """Streaming DiLoCo's state (per fragment) and DiLoCo's (the model whole) do not load into each other."""
        saved = state.get("algorithm") or {}
        if not isinstance(self.algo, DiLoCo) or "global" not in saved:
            return
        fragments = saved_fragments(saved)
        if fragments != self.algo.fragments:
            how = f"in {fragments} fragments (set diloco.fragments={fragments} and diloco.overlap=false" \
                if fragments > 1 else "with the model synced whole (set diloco.fragments=1"
            raise ResumeError(f"the checkpoint at step {state.get('step')} in {self.out_dir} was trained {how} to "
                              f"resume it), {START_OVER}")

    def state(self) -> dict:
        return {"step": self.step, "items": self.items, **self.wire_bytes(),
                "finished": self.finished, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "algorithm": self.algo.state_dict(),
                "data": self.data.state_dict(), "rng": checkpoint.rng_state(), "config": config_to_dict(self.cfg)}

    def load(self, state: dict) -> None:
        was = _optimizer_of(state)
        if was != self.cfg.optim.name:  # the optimizer state of one cannot drive the other
            found = f"was trained with optim.name={was}: set optim.name={was} to resume it" if was else \
                "names no optimizer we know"
            raise ResumeError(f"the checkpoint at step {state.get('step')} in {self.out_dir} {found}, {START_OVER}")
        betas = (state["config"].get("optim") or {}).get("betas")
        if betas is not None and list(betas) != list(self.cfg.optim.betas):
            # the optimizer's saved state would keep its betas, and the preset's outer lr (and H) follows beta1
            said = "[" + ",".join(f"{b:g}" for b in betas) + "]"
            raise ResumeError(f"the checkpoint at step {state.get('step')} in {self.out_dir} was trained with "
                              f"optim.betas={said}: set optim.betas={said} to resume it, {START_OVER}")
        self._check_fragments(state)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.data.load_state_dict(state["data"])
        self.step, self.items, self.wire.bytes_sent = state["step"], state["items"], state["bytes_sent"]
        if self.lan is not None:
            self.lan.bytes_sent = state.get("lan_bytes", 0)
        # a run restored with more steps than it had must run its end-of-training sync again
        self.finished = state.get("finished", False) and state["step"] >= self.cfg.steps
        self.algo.load_state_dict(state["algorithm"])
        checkpoint.set_rng_state(state["rng"])

    def maybe_resume(self) -> bool:
        """Load the newest complete checkpoint (agreed by all ranks, or by the elastic quorum).
        False when an elastic run has already finished without this worker."""
        step = self.checkpoints.newest_complete() if self.cfg.checkpoint.resume else None
        # every rank reads the same config: with resume off none of them takes part in the agreement,
        # which would pick up the newest step all ranks hold
        if self.membership is None and self.rt.distributed and self.cfg.checkpoint.resume:
            step = checkpoint.common_step(step, self.checkpoints.complete_steps(), self.rt.world_size)
        if step is None and self.cfg.checkpoint.resume and not self.checkpoints.steps_on_disk():
            moved = self.checkpoints.other_ranks_here()
            if moved:  # said loudly: the run starts again from step 0 (issue 41, item 9)
                warn(
                    f"rank {self.rt.rank} has no checkpoint of its own in {self.checkpoints.root} but ranks "
                    f"{', '.join(map(str, moved[:8]))} do: ranks moved between nodes that each keep their own "
                    "checkpoints, so this run starts from step 0; give it a ReadWriteMany class "
                    "(recovery.storage_class) or an HF repo (recovery.hf_repo) to resume wherever ranks land")
        if step is not None:
            self.load(self.checkpoints.load(step))
            self.resumed_from = step
            say(self.rt.rank, f"resumed from checkpoint at step {step}")
            elastic.emit("resumed", rank=self.rt.rank, step=step)
        return self.membership.join() if self.membership else True

    def refuse_an_earlier_run(self, restart: int = 0) -> None:
        """checkpoint.resume=false where an earlier run's checkpoints are (out_dir, or an HF Hub repo this
        run uploads to): ResumeError, one line saying what to do; nothing is changed but a marker. torchrun
        restarts a worker that exits (2 included): a launch's restarts refuse again while this rank's marker
        from its first start is there (a restart that follows a crash of the run itself goes on from its
        own checkpoints); a launch's first start clears an older launch's marker."""
        marker = self.out_dir / f".refused-start.rank{self.rt.rank}"
        if restart and not marker.exists():
            return
        if not restart:
            marker.unlink(missing_ok=True)
        try:
            self._earlier_run_checks()
        except ResumeError:
            if not restart:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                marker.touch()
            raise

    def _earlier_run_checks(self) -> None:
        if self.cfg.checkpoint.resume:
            return
        held = self.checkpoints.steps_on_disk()
        if held:
            # a new run would keep the older run's higher steps and prune its own (and a later resume
            # would load the older run): say so and leave both as they are
            raise ResumeError(f"{self.checkpoints.root} holds checkpoints of an earlier run (up to step {max(held)}) and "
                              f"checkpoint.resume is false: move them aside or choose a new out_dir to start over, "
                              f"or set checkpoint.resume=true to go on from them")
        for hub, setting in self._upload_repos():  # likewise on the hub: uploads would land beside the older run's
            held = hub.held_steps()
            if isinstance(held, str):
                raise ResumeError(f"cannot check the HF Hub repo {hub.repo} ({setting}) for an earlier run's checkpoints "
                                  f"({held}): try again when the hub answers, or set checkpoint.resume=true")
            if held:
                raise ResumeError(f"the HF Hub repo {hub.repo} ({setting}) holds checkpoints of an earlier run (up to "
                                  f"step {max(held)}) and checkpoint.resume is false: name a new repo in {setting} (or "
                                  f"delete the repo's checkpoints/) to start over, or set checkpoint.resume=true to go "
                                  f"on from them")

    def _upload_repos(self) -> list[tuple[HubMirror, str]]:
        """The HF Hub repos this run's checkpoints go to, each with the setting that named it: the recovery
        policy's mirror, and checkpoint.hf_repo (needs HF_TOKEN: without it nothing is uploaded)."""
        repos = [(self.checkpoints.hub, "recovery.hf_repo")] if self.checkpoints.hub is not None else []
        named = self.cfg.checkpoint.hf_repo
        if named and os.environ.get("HF_TOKEN") and named not in {hub.repo for hub, _ in repos}:
            repos.append((HubMirror(named), "checkpoint.hf_repo"))
        return repos

    def save(self, uploader=None) -> None:
        path = self.checkpoints.save(self.step, self.state())
        if uploader is not None:
            uploader.upload(path)

    def train_step(self) -> float:
        batch = to_device(self.data.next_batch(), self.rt.device)
        dtype = torch.bfloat16 if self.cfg.precision == "bf16" else None
        with torch.autocast(self.rt.device.type, dtype=dtype, enabled=dtype is not None):
            loss, items = self.loss_fn(self.model, batch)
        loss.backward()
        self.algo.after_backward()
        if self.cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.items += items
        self.algo.after_optimizer_step(self.step)
        return float(loss.detach())

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Held-out loss of the final (synchronised) weights, where the data source has a held-out set."""
        if getattr(self.data, "eval_batches", None) is None or self.cfg.logging.eval_batches <= 0:
            return {}
        self.model.eval()
        batches = self.data.eval_batches(self.cfg.logging.eval_batches)
        losses = [float(self.loss_fn(self.model, to_device(b, self.rt.device))[0]) for b in batches]
        self.model.train()
        result = {"eval_loss": sum(losses) / len(losses)}
        if hasattr(self.data, "ideal_loss"):  # excess over the true chain's loss on the same tokens
            ideal = self.data.ideal_loss(batches)
            result.update(entropy_floor=self.data.entropy_floor, ideal_loss=ideal,
                          excess_loss=result["eval_loss"] - ideal)
        return result

    @torch.no_grad()
    def evaluate_consensus(self) -> dict:
        """Held-out loss of the weights every rank agrees on now: DDP's weights, DiLoCo's global
        (outer) weights; the local weights are put back afterwards."""
        agreed = getattr(self.algo, "global_flat", None)
        if agreed is None:
            return self.evaluate()
        params = [p for p in self.model.parameters() if p.requires_grad]
        local = [p.detach().clone() for p in params]
        self.algo._write_params(agreed)
        try:
            return self.evaluate()
        finally:
            for p, saved in zip(params, local):
                p.copy_(saved)


def _refuse(exc: Exception, telemetry: Telemetry | None = None) -> int:
    """A run this config cannot do: one line saying why, and exit status 2."""
    print(f"error: {exc}", file=sys.stderr)
    if telemetry is not None:
        telemetry.close()
    teardown()
    return 2


def run(cfg: TrainConfig) -> int:
    rt = setup(cfg.dist, cfg.device)
    try:
        trainer = Trainer(cfg, rt)
    except topology.TopologyError as exc:
        return _refuse(exc)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    try:  # before W&B and uploads start: a refused run leaves the earlier one's as they are
        trainer.refuse_an_earlier_run(restart)
    except ResumeError as exc:
        return _refuse(exc)
    name = cfg.logging.run_name or f"{cfg.model}-{cfg.size}-{cfg.gradient_compression}"
    telemetry = Telemetry(rank=rt.rank, out_dir=trainer.out_dir, config=config_to_dict(cfg),
                          wandb_on=cfg.logging.wandb, project=cfg.logging.wandb_project,
                          entity=cfg.logging.wandb_entity, run_name=name,
                          wandb_init_timeout=cfg.logging.wandb_init_timeout)
    uploader = None
    if rt.rank == 0 and cfg.checkpoint.hf_repo:
        from recipes.hub import HubUploader

        uploader = HubUploader(cfg.checkpoint.hf_repo, private=cfg.checkpoint.hf_private)
    comp = trainer.comp
    sign_step = comp.algorithm == "demo" and cfg.demo.sign_step  # its own step size, demo.sign_lr
    outer = f", outer lr {cfg.demo.sign_lr if sign_step else comp.outer_lr:g}" if comp.algorithm != "ddp" else ""
    say(rt.rank, f"{cfg.model}/{cfg.size} {count_parameters(trainer.model):,} params, preset "
                 f"{comp.preset} ({comp.algorithm}, H={comp.inner_steps}, {comp.bits} bits{outer}), "
                 f"{rt.world_size} worker(s) on {rt.device}, restart {restart}")
    try:
        joined = trainer.maybe_resume()
    except (ResumeError, CheckpointRefused) as exc:
        return _refuse(exc, telemetry)
    if not joined:
        say(rt.rank, "the other workers finished the run while this one was away")
        return 0
    losses, window_start = [], time.perf_counter()
    utilization = Utilization(rt.rank, rt.device)
    log_every, every, eval_every = cfg.logging.log_every, cfg.checkpoint.every, cfg.logging.eval_every
    curve = []  # (step, held-out loss of the agreed weights, bytes sent): the bench's reach curve
    while trainer.step < cfg.steps:
        losses.append(trainer.train_step())
        step = trainer.step
        if step % log_every == 0 or step == cfg.steps:
            elapsed = time.perf_counter() - window_start
            record = {"step": step, "loss": sum(losses) / len(losses),
                      "lr": trainer.scheduler.get_last_lr()[0], **trainer.wire_bytes(),
                      "outer_step": trainer.algo.outer_step, "items": trainer.items * rt.world_size,
                      "step_time": elapsed / len(losses), "restart": restart}
            say(rt.rank, f"step {step}/{cfg.steps} loss {record['loss']:.4f} lr {record['lr']:.2e} "
                         f"outer {record['outer_step']} sent {record['bytes_sent'] / 1e6:.3f}MB "
                         f"{1000 * record['step_time']:.1f}ms/step")
            telemetry.log(record)
            utilization.report(step)  # every rank's own figures, for the supervisor (rank 0 alone writes metrics)
            losses, window_start = [], time.perf_counter()
        if eval_every and step % eval_every == 0 and rt.rank == 0:
            point = trainer.evaluate_consensus()
            if "eval_loss" in point:
                curve.append({"step": step, "eval_loss": point["eval_loss"], "bytes_sent": trainer.wire.bytes_sent})
                telemetry.log({"step": step, "eval_loss": point["eval_loss"]})
        if every and step % every == 0 and step < cfg.steps:
            trainer.save(uploader)
    if not trainer.finished:
        trainer.algo.finish(trainer.step)
        trainer.finished = True
    if trainer.membership:
        trainer.membership.mark_finished()
    result = {"step": trainer.step, **trainer.wire_bytes(), "outer_step": trainer.algo.outer_step,
              **trainer.evaluate()}
    if rt.rank == 0 and "eval_loss" in result:
        telemetry.log({**result, "loss": result["eval_loss"]})
        (trainer.out_dir / "result.json").write_text(json.dumps({**result, "world_size": rt.world_size,
                                                                 "eval_curve": curve}))
    trainer.save(uploader)
    if uploader is not None:
        uploader.wait()
    trainer.checkpoints.wait()
    telemetry.close()
    say(rt.rank, "done " + " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                    for k, v in result.items()))
    teardown()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a YAML file under recipes/configs/")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. steps=50 optim.lr=1e-3")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        for e in exc.errors:
            print(f"config error: {e['path']}: {e['message']}", file=sys.stderr)
        return 2
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
