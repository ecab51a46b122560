"""Progress lines (every rank), metrics JSONL and W&B (rank 0).

The JSONL is what the app draws live curves from: one object per logged step,
appended and flushed at once. After a restart, steps since the last checkpoint
appear again; readers keep the last line for a step.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from contextlib import contextmanager
from pathlib import Path

SECRET_ENV = ("WANDB_API_KEY", "HF_TOKEN")
# Seconds wandb.init may take online (logging.wandb_init_timeout) before rank 0 logs offline instead:
# wandb's own 90 s, at every start and restart, then no W&B at all, is what a worker behind a firewall got.
WANDB_INIT_TIMEOUT_S = 30.0


def redact(text: str) -> str:
    """Remove any secret from the environment that found its way into `text`."""
    for key in SECRET_ENV:
        value = os.environ.get(key)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def one_line(exc: Exception) -> str:
    """An exception as one redacted line of at most 300 characters (wandb's and the hub client's span several)."""
    return redact(" ".join(f"{type(exc).__name__}: {exc}".split()))[:300]


def say(rank: int, message: str) -> None:
    """One progress line on stdout, flushed so torchrun --tee shows it live."""
    print(redact(f"[rank {rank}] {message}"), flush=True)


def emit(kind: str, **detail) -> None:
    """A machine-readable `geotrain-event {json}` line: the local supervisor and the Kubernetes
    backend derive the workspace's state from these, the log view shows them readably
    (core.domain.run_events)."""
    print("geotrain-event " + json.dumps({"kind": kind, "at": time.time(), **detail}), flush=True)


_waited = [0.0]  # seconds the training thread spent blocked in collectives, since the process started


@contextmanager
def network_wait():
    """Count the time inside as waiting on the network (the Wire's blocking collectives and waits).
    Only the training thread counts: a background exchange waiting is not training waiting."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        _waited[0] += time.perf_counter() - started


class TimedWork:
    """An async collective's handle whose wait() counts as network wait."""

    def __init__(self, work) -> None:
        self.work = work

    def wait(self, *args, **kwargs):
        with network_wait():
            return self.work.wait(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.work, name)


def timed(work):
    """`work` with its wait() counted (None stays None: nothing was started)."""
    return None if work is None else TimedWork(work)


class Utilization:
    """Per logging interval: the share of wall time this process ran on CPU (all its threads, so
    above 1 with several cores), the seconds it waited on the network, and the GPU's figures where
    there is one. Every rank emits a `utilization` event; the supervisor keeps each worker's last."""

    def __init__(self, rank: int, device=None) -> None:
        self.rank, self.device = rank, device
        self.reset()

    def reset(self) -> None:
        self.wall, self.cpu, self.waited = time.perf_counter(), time.process_time(), _waited[0]

    def sample(self) -> dict:
        wall = max(time.perf_counter() - self.wall, 1e-9)
        figures = {"rank": self.rank, "wall_s": round(wall, 4),
                   "cpu": round((time.process_time() - self.cpu) / wall, 4),
                   "wait_s": round(_waited[0] - self.waited, 4), **gpu_figures(self.device)}
        self.reset()
        return figures

    def report(self, step: int) -> dict:
        figures = self.sample()
        emit("utilization", step=step, **figures)
        return figures


def gpu_figures(device) -> dict:
    """GPU busy % (NVML, through torch) and bytes allocated; empty on a CPU or where NVML is missing."""
    if device is None or getattr(device, "type", "cpu") != "cuda":
        return {}
    import torch

    figures = {"gpu_memory_bytes": int(torch.cuda.memory_allocated(device))}
    try:
        figures["gpu"] = float(torch.cuda.utilization(device))
    except Exception:  # noqa: BLE001 - no NVML (pynvml missing, a MIG slice): memory alone
        pass
    return figures


class ProgressEvents:
    """`data` progress events for one preparation, at most one every `every_s` seconds."""

    def __init__(self, source: str, unit: str, total: int | None = None, every_s: float = 1.0,
                 **detail) -> None:
        self.source, self.unit, self.total, self.every_s, self.detail = source, unit, total, every_s, detail
        self.started = self.last = time.monotonic()
        emit("data", stage="start", source=source, unit=unit, total=total, **detail)

    def progress(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            emit("data", stage="progress", source=self.source, unit=self.unit, done=done,
                 total=self.total, **self.detail)

    def done(self, done: int | None = None, cached: bool = False) -> None:
        extra = {"done": done} if done is not None else {}
        emit("data", stage="done", source=self.source, unit=self.unit, cached=cached,
             seconds=round(time.monotonic() - self.started, 3), **extra, **self.detail)


class Telemetry:
    """Rank 0 writes metrics.jsonl and W&B; other ranks only print."""

    def __init__(self, *, rank: int, out_dir: Path, config: dict, wandb_on: bool, project: str | None,
                 entity: str | None, run_name: str, wandb_init_timeout: float = WANDB_INIT_TIMEOUT_S) -> None:
        self.rank = rank
        self.metrics_path = out_dir / "metrics.jsonl"
        self.wandb_run = None
        if rank != 0:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        if wandb_on:
            self.wandb_run = _start_wandb(out_dir, config, project, entity, run_name, wandb_init_timeout)

    def log(self, record: dict) -> None:
        if self.rank != 0:
            return
        record = {**record, "time": time.time()}
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def close(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def _start_wandb(out_dir: Path, config: dict, project: str | None, entity: str | None, run_name: str,
                 init_timeout: float = WANDB_INIT_TIMEOUT_S):
    """Online with WANDB_API_KEY (offline when that fails within `init_timeout` s), offline otherwise; the
    run id is kept so a restart continues the run."""
    try:
        import wandb
    except ImportError:
        say(0, "wandb is not installed; logging to metrics.jsonl only")
        return None
    if not os.environ.get("WANDB_API_KEY"):
        os.environ.setdefault("WANDB_MODE", "offline")
    project = project or "geotrain"  # geotrain names one per workspace; by hand, the shared one
    id_file = out_dir / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(8)
    id_file.write_text(run_id)

    def init(**timeout):
        return wandb.init(project=project, entity=entity, name=run_name, id=run_id, resume="allow",
                          dir=str(out_dir), config=config,
                          settings=wandb.Settings(console="off", silent=True, **timeout))

    try:
        run = init(init_timeout=init_timeout)
    except Exception as exc:  # a logging outage must not stop training
        if os.environ.get("WANDB_MODE") == "offline":
            say(0, f"wandb init failed ({one_line(exc)}); continuing without it")
            return None
        # no route, no answer in time, a refused key: the run's W&B history is kept on disk instead
        say(0, f"W&B online failed ({one_line(exc)}); logging offline instead, to upload later")
        os.environ["WANDB_MODE"] = "offline"
        try:
            wandb.teardown()  # the failed online run holds its id until then
        except Exception:
            pass  # the offline start below says whether it mattered
        try:
            run = init()
        except Exception as again:
            say(0, f"wandb init failed ({one_line(again)}); continuing without it")
            return None
    if getattr(run, "disabled", False):  # WANDB_MODE=disabled, or a settings file's: nothing to record or sync
        say(0, "W&B is disabled here (WANDB_MODE or wandb's settings); logging to metrics.jsonl only")
        return None
    _record_run(out_dir, run, project)
    return run


def _record_run(out_dir: Path, run, project: str) -> None:
    """wandb_run.json: where the run is, for `geotrain workspaces show` and `sync`. The run's own
    settings say whether it is offline (WANDB_MODE=dryrun and a settings file's mode=offline too)."""
    offline = bool(getattr(run, "offline", os.environ.get("WANDB_MODE") in ("offline", "dryrun")))
    sync_dir = str(Path(run.settings.sync_dir).absolute())
    info = {"mode": "offline" if offline else "online", "project": project, "id": run.id,
            "url": None if offline else run.url, "sync_dir": sync_dir}
    tmp = out_dir / ".wandb_run.json.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, out_dir / "wandb_run.json")
    if offline:
        say(0, f"W&B offline run in {sync_dir}; upload it later with: wandb sync {sync_dir}")
    else:
        say(0, f"W&B run: {run.url}")
