"""Shared by the fault tests and the recovery benchmark: deploy a tiny run on the local
cluster, find its worker processes, read per-worker progress from the logs."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import psutil

from core.backends.local.supervisor import workspace_processes
from core.workspaces import DeployRequest, WorkspaceService

STEP = re.compile(r"\bstep (\d+)/\d+ loss ([0-9.]+)")
FAST_RECOVERY = {"max_recoveries": 2, "join_timeout_s": 30, "heartbeat_timeout_s": 2,
                 "op_timeout_s": 15}


def deploy(service: WorkspaceService, *, preset: str, workers: int, steps: int, inner: int = 8,
           every: int = 0, recovery: dict | None = None, extra: tuple[str, ...] = ()):
    sets = (f"diloco.inner_steps={inner}", "logging.log_every=1", "logging.wandb=false",
            f"checkpoint.every={every}", "checkpoint.keep=3", "data.batch_size=8",
            "optim.warmup_steps=5", "logging.eval_batches=4", *extra)
    spec = service.build_spec(DeployRequest(preset=preset, workers=workers, steps=steps, sets=sets,
                                            recovery={**FAST_RECOVERY, **(recovery or {})}))
    return service.deploy(spec, {})


def worker_pids(run_dir: Path) -> dict:
    """Rank (and "spare") -> pid of the live worker processes, as the elastic pool records them."""
    try:
        pids = json.loads((Path(run_dir) / "workers.json").read_text())
        return {(int(r) if r.isdigit() else r): pid for r, pid in pids.items()}
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def torchrun_workers(workspace_id: str) -> list[psutil.Process]:
    """The training processes of a torchrun group (children of torchrun, RANK in their env)."""
    found = []
    for proc in workspace_processes(workspace_id):
        try:
            if "recipes.train" in " ".join(proc.cmdline()) and "RANK" in proc.environ():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def progress(run_dir: Path, worker: int) -> list[tuple[float, int, float]]:
    """(file mtime-free arrival order index, step, loss) for each progress line of a worker."""
    path = Path(run_dir) / "logs" / f"worker-{worker}.log"
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [(i, int(m.group(1)), float(m.group(2))) for i, m in enumerate(STEP.finditer(text))]


def last_step(run_dir: Path, worker: int) -> int:
    rows = progress(run_dir, worker)
    return rows[-1][1] if rows else 0


def wait_for(predicate, timeout: float, what: str, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def wait_done(service: WorkspaceService, workspace_id: str, timeout: float = 300) -> str:
    return wait_for(lambda: (s := service.status(workspace_id).status) in ("COMPLETED", "FAILED") and s,
                    timeout, f"{workspace_id} to end")
