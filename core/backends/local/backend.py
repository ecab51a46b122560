"""The embedded `local` cluster: each workspace is a torchrun process group on this
machine, run by a detached supervisor (see local_supervisor) in its own directory:

    <data dir>/workspaces/<id>/
        launch.json  config.yaml  supervisor.pid  exit_code  history.jsonl
        logs/worker-N.log  logs/launcher.log   out/metrics.jsonl  out/checkpoints/

DDP runs as one fixed group of workers; DiLoCo with several workers runs as an elastic
pool (one process per worker) that keeps training when a worker is lost. Either way the
workers meet in a file store in the run's private directory and their collectives bind
loopback: no port of a local workspace is reachable from another host
(core.backends.local.private_stores).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import yaml

from core.state import paths
from core.backends.base import Backend, LaunchPlan, ShellTarget, WorkerProcess, WorkerState, WorkspaceState
from core.backends.local.run_history import read_history, read_jsonl, read_phase, read_utilization, \
    read_utilization_history
from core.errors import BackendError, InvalidInput, NotFound
from core.domain.line_splitter import LineSplitter
from core.domain.custom_training import CUSTOM_TRAINING, command_env, local_argv
from core.domain.records import Status, WorkspaceSpec
from core.domain.recipe_catalog import presets, recipe_env
from core.domain.run_events import natural_key

# psutil, the supervisor's modules and exports load where a workspace is started, recovered,
# restored or deleted: reading a finished one's status (`workspaces show`) needs none of them.
if TYPE_CHECKING:
    import psutil

    from core.backends.export import ExportedRun

POLL_S = 0.2
READ_CHUNK = 1024 * 1024
VANISHED = "its supervisor process vanished"


def _cuda_available() -> bool:
    return shutil.which("nvidia-smi") is not None


def _exit_code(path: Path) -> int:
    """The supervisor's exit code; anything but a short integer (the run directory is open to
    the workers, which might write there) reads as 70, a failure."""
    try:
        text = path.read_text(errors="replace")[:16].strip()
    except OSError:
        return 70
    return int(text) if re.fullmatch(r"-?[0-9]{1,4}", text) else 70


class LocalBackend(Backend):
    NOTIFIES = True  # the supervisor sends them (core.backends.local.notifier)

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root else paths.workspaces_dir()

    def run_dir(self, workspace_id: str) -> Path:
        return self.root / workspace_id

    # launch -----------------------------------------------------------------
    def _config(self, workspace_id: str, spec: WorkspaceSpec) -> dict:
        config = dict(spec.config)
        config["out_dir"] = str(self.run_dir(workspace_id) / "out")
        return config

    def _mode(self, spec: WorkspaceSpec) -> str:
        from core.domain.recovery import RecoverySettings  # pydantic: not loaded to read a status

        preset = spec.config.get("gradient_compression") or spec.preset
        algorithm = presets().get(preset, {}).get("algorithm", "ddp")
        elastic = RecoverySettings.from_dict(spec.recovery).is_elastic(algorithm, spec.workers)
        if spec.config.get("datacenters", 1) != 1:
            elastic = False  # hierarchical DiLoCo: one torchrun group (datacenter sub-groups); a lost worker restarts it
        return "elastic" if elastic else "group"

    def _env(self, workspace_id: str, spec: WorkspaceSpec, has_wandb_key: bool) -> dict[str, str]:
        from core.domain.recovery import RecoverySettings  # pydantic: not loaded to read a status

        from core.backends.local.private_stores import loopback_env
        from core.backends.local.supervisor import MARKER

        env = {"PYTHONUNBUFFERED": "1", MARKER: workspace_id,
               "PYTHONPATH": recipe_env()["PYTHONPATH"], **loopback_env()}
        if not has_wandb_key:
            env["WANDB_MODE"] = "offline"
        env.update(RecoverySettings.from_dict(spec.recovery).worker_env(spec.recovery.get("checkpoint_dir")))
        return env

    def plan(self, workspace_id: str, spec: WorkspaceSpec) -> LaunchPlan:
        config_path = self.run_dir(workspace_id) / "config.yaml"
        command = self._command(workspace_id, spec, config_path)
        argv = command["worker_argv"]
        dcs = spec.config.get("datacenters", 1)
        layout = f", {dcs} datacenters x {spec.workers // dcs}" if isinstance(dcs, int) and dcs > 1 else ""
        text = (f"# local workspace {workspace_id}: {spec.workers} workers{layout} on this machine "
                f"({'NCCL' if _cuda_available() else 'gloo on CPU'}, {command['mode']})\n"
                f"# one process per worker (RANK 0-{spec.workers - 1}), meeting in a file store in "
                f"the run's private directory: no network port\n"
                f"cd {shlex.quote(command.get('cwd') or str(self.run_dir(workspace_id)))}\n{shlex.join(argv)}\n")
        return LaunchPlan(text, yaml.safe_dump(self._config(workspace_id, spec), sort_keys=False))

    def deploy(self, workspace_id: str, spec: WorkspaceSpec, secret_refs: dict[str, str]) -> str:
        """Start the supervisor. `secret_refs` maps env var -> secret-store reference."""
        from core.domain.recovery import RecoverySettings  # pydantic: not loaded to read a status

        run_dir = self._private_run_dir(workspace_id)
        (run_dir / "logs").mkdir()
        (run_dir / "out").mkdir(exist_ok=True)  # restore() may have seeded it
        config_path = run_dir / "config.yaml"
        config_path.write_text(yaml.safe_dump(self._config(workspace_id, spec), sort_keys=False))
        launch = {"workspace_id": workspace_id, **self._command(workspace_id, spec, config_path),
                  "workers": spec.workers,
                  "max_recoveries": RecoverySettings.from_dict(spec.recovery).max_recoveries,
                  "standby": RecoverySettings.from_dict(spec.recovery).standby,
                  "keep_failed": RecoverySettings.from_dict(spec.recovery).keep_failed_pods,
                  "env": self._env(workspace_id, spec, "WANDB_API_KEY" in secret_refs),
                  "secret_refs": secret_refs, "secrets_path": str(paths.secrets_path())}
        if spec.template == CUSTOM_TRAINING:
            project = (spec.config.get("logging") or {}).get("wandb_project")  # wandb reads WANDB_PROJECT
            launch["env"].update(command_env(str(run_dir / "out"), spec.preset, spec.steps),
                                 **({"WANDB_PROJECT": project} if isinstance(project, str) else {}))
        (run_dir / "launch.json").write_text(json.dumps(launch, indent=2))
        self._start_supervisor(run_dir, dict(os.environ, PYTHONPATH=launch["env"]["PYTHONPATH"]))
        return str(run_dir)

    def _private_run_dir(self, workspace_id: str) -> Path:
        """The run directory, 0700 from its creation (restore() may have made it first): its
        stores, logs and checkpoints are this user's alone."""
        from core.backends.local.private_stores import private_dir

        return private_dir(self.run_dir(workspace_id))

    def _start_supervisor(self, run_dir: Path, env: dict[str, str]) -> None:
        env.pop("WANDB_API_KEY", None)
        env.pop("HF_TOKEN", None)
        with open(run_dir / "logs" / "supervisor.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "core.backends.local.supervisor", "--daemonize", str(run_dir)],
                cwd=run_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True)
        if proc.wait(timeout=30) != 0:
            raise BackendError("the local supervisor did not start",
                               f"see {run_dir / 'logs' / 'supervisor.log'}")

    def _command(self, workspace_id: str, spec: WorkspaceSpec, config_path: Path) -> dict:
        """What each worker runs, in which mode and directory: the recipe, or a custom-training command
        (always one fixed group: its own loop, not the elastic pool, decides how it trains)."""
        if spec.template != CUSTOM_TRAINING:
            return {"worker_argv": self._worker_argv(config_path), "mode": self._mode(spec)}
        return {"worker_argv": local_argv(spec.command), "mode": "group",
                "cwd": spec.workdir or str(self.run_dir(workspace_id))}

    def _worker_argv(self, config_path: Path) -> list[str]:
        """One worker of an elastic pool (rank and store come from its environment)."""
        return [sys.executable, "-m", "recipes.train", "--config", str(config_path)]

    def recover(self, workspace_id: str, spec: WorkspaceSpec, state: WorkspaceState) -> str | None:
        """The supervisor itself vanished (killed, or the machine rebooted): start a new
        one in the same run directory; the workers resume from the newest checkpoint.
        (Failures of workers are the supervisor's own business.)"""
        from core.backends.local.supervisor import kill_all, workspace_processes

        run_dir = self.run_dir(workspace_id)
        if state.reason != VANISHED or not (run_dir / "launch.json").exists():
            return None
        kill_all(workspace_processes(workspace_id), grace=5)
        (run_dir / "supervisor.pid").unlink(missing_ok=True)
        launch = json.loads((run_dir / "launch.json").read_text())
        launch["workspace_recoveries"] = int(launch.get("workspace_recoveries", 0)) + 1  # the budget is shared
        (run_dir / "launch.json").write_text(json.dumps(launch, indent=2))
        self._start_supervisor(run_dir, dict(os.environ, PYTHONPATH=recipe_env()["PYTHONPATH"]))
        return "the supervisor process vanished"

    # observe ----------------------------------------------------------------
    def history(self, workspace_id: str) -> list[dict]:
        return read_history(self.run_dir(workspace_id))

    @staticmethod
    def _our_supervisor(run_dir: Path) -> psutil.Process | None:
        """The process in supervisor.pid if it is this run's supervisor: a PID can be reused by
        any process after ours ended (or the file edited), and that one must never be killed."""
        import psutil

        try:
            proc = psutil.Process(int((run_dir / "supervisor.pid").read_text()))
            argv = proc.cmdline()
            if {str(run_dir), str(run_dir.resolve())} & set(argv):  # its argv ends with the run dir
                return proc
        except (OSError, ValueError, psutil.Error):
            pass
        return None

    def _supervisor_alive(self, run_dir: Path) -> bool:
        import psutil

        proc = self._our_supervisor(run_dir)
        try:
            return proc is not None and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def status(self, workspace_id: str) -> WorkspaceState:
        run_dir = self.run_dir(workspace_id)
        if not run_dir.exists():
            return WorkspaceState(Status.DELETED.value, "its files are gone")
        exit_file = run_dir / "exit_code"
        if exit_file.exists():
            code = _exit_code(exit_file)
            workers = self._workers(run_dir, Status.COMPLETED.value if code == 0 else Status.FAILED.value)
            if code == 0:
                return WorkspaceState(Status.COMPLETED.value, "", workers, 0)
            return WorkspaceState(Status.FAILED.value, self._failure_reason(run_dir, code), workers, code)
        workers = self._workers(run_dir)
        if self._supervisor_alive(run_dir):
            phase = read_phase(run_dir)
            if phase is not None:  # what the supervisor derived from the workers' lines
                return WorkspaceState(phase["status"], phase.get("reason", ""),
                                      self._phase_workers(workers, phase))
            started = any(w.status == "RUNNING" for w in workers)
            return WorkspaceState((Status.RUNNING if started else Status.PENDING).value, "", workers)
        if not (run_dir / "supervisor.pid").exists() and time.time() - run_dir.stat().st_mtime < 30:
            return WorkspaceState(Status.PENDING.value, "starting", workers)
        return WorkspaceState(Status.FAILED.value, VANISHED, workers)

    def _workers(self, run_dir: Path, ended: str | None = None) -> list[WorkerState]:
        logs = sorted((run_dir / "logs").glob("worker-*.log"),
                      key=lambda p: int(p.stem.split("-")[1]))
        return [WorkerState(p.stem, ended or ("RUNNING" if p.stat().st_size else "PENDING"))
                for p in logs]

    @staticmethod
    def _phase_workers(workers: list[WorkerState], phase: dict) -> list[WorkerState]:
        known = phase.get("workers") or {}
        names = sorted({w.name for w in workers} | set(known), key=natural_key)
        return [WorkerState(name, *[str(v) for v in (known.get(name) or [Status.PENDING.value, ""])][:2])
                for name in names]

    def _failure_reason(self, run_dir: Path, code: int) -> str:
        for name in ("launcher.log", "worker-0.log"):
            path = run_dir / "logs" / name
            if path.exists():
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
                errors = [ln for ln in lines if "Error" in ln or "error" in ln]
                if errors:
                    return f"exit code {code}: {errors[-1].strip()[:200]}"
        return f"exit code {code}"

    def list(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if (p / "launch.json").exists())

    def logs(self, workspace_id: str, follow: bool = False) -> Iterator[tuple[str, str]]:
        run_dir = self.run_dir(workspace_id)
        if not run_dir.exists():
            raise NotFound(f"workspace {workspace_id!r} has no files on this machine")
        tails: dict[Path, tuple[int, str]] = {}
        while True:
            done = not follow or self.status(workspace_id).status in (
                Status.COMPLETED.value, Status.FAILED.value, Status.DELETED.value)
            yield from self._read_new(run_dir, tails)
            if done:
                return
            time.sleep(POLL_S)

    def _read_new(self, run_dir: Path, tails: dict) -> Iterator[tuple[str, str]]:
        log_dir = run_dir / "logs"
        if not log_dir.exists():
            return
        for path in sorted(log_dir.glob("*.log")):
            if path.name == "supervisor.log":
                continue
            offset, splitter = tails.get(path) or (0, LineSplitter())
            worker = path.stem  # worker-N, or launcher: what the supervisor says of the group
            try:
                with open(path, "rb") as handle:
                    handle.seek(offset)
                    while chunk := handle.read(READ_CHUNK):  # bounded reads, linear splitting
                        offset += len(chunk)
                        for line in splitter.feed(chunk):
                            yield worker, line
            except FileNotFoundError:
                continue
            tails[path] = (offset, splitter)

    def metrics(self, workspace_id: str) -> list[dict]:
        return read_jsonl(self.run_dir(workspace_id) / "out" / "metrics.jsonl")

    def utilization(self, workspace_id: str) -> dict[str, dict]:
        return read_utilization(self.run_dir(workspace_id))

    def utilization_history(self, workspace_id: str) -> dict[str, list[dict]]:
        return read_utilization_history(self.run_dir(workspace_id))

    def processes(self, workspace_id: str) -> list[WorkerProcess]:
        from core.backends.local.worker_processes import list_processes

        return list_processes(self.run_dir(workspace_id), workspace_id)

    def shell(self, workspace_id: str, rank: int, shell: str) -> ShellTarget:
        from core.backends.local.worker_processes import worker_shell

        return worker_shell(self.run_dir(workspace_id), workspace_id, rank, shell)

    # results kept -------------------------------------------------------------
    def checkpoint_root(self, workspace_id: str, spec: WorkspaceSpec) -> Path:
        chosen = (spec.recovery or {}).get("checkpoint_dir")
        return Path(chosen) if chosen else self.run_dir(workspace_id) / "out" / "checkpoints"

    def result_files(self, workspace_id: str, spec: WorkspaceSpec) -> dict[str, Path]:
        run_dir = self.run_dir(workspace_id)
        out = run_dir / "out"
        return {"config.yaml": run_dir / "config.yaml", "history.jsonl": run_dir / "history.jsonl",
                "metrics.jsonl": out / "metrics.jsonl", "result.json": out / "result.json",
                "wandb_run.json": out / "wandb_run.json", "logs": run_dir / "logs",
                "wandb": out / "wandb", "checkpoints": self.checkpoint_root(workspace_id, spec)}

    def check_restore(self) -> None:
        return None

    def restore(self, workspace_id: str, spec: WorkspaceSpec, export: ExportedRun) -> list[Path]:
        if export.ranks != spec.workers:
            raise InvalidInput(f"the export's checkpoint at step {export.step} has {export.ranks} "
                               f"worker(s), the new workspace {spec.workers}",
                               f"deploy with --workers {export.ranks}")
        out = self._private_run_dir(workspace_id) / "out"
        out.mkdir()
        from core.backends.export import seed_checkpoints

        return seed_checkpoints(export, self.checkpoint_root(workspace_id, spec), out)

    # delete -----------------------------------------------------------------
    def delete(self, workspace_id: str) -> None:
        from core.backends.local.supervisor import kill_all, workspace_processes

        run_dir = self.run_dir(workspace_id)
        supervisor = self._our_supervisor(run_dir)
        if supervisor is not None:
            kill_all([supervisor], grace=15)
        kill_all(workspace_processes(workspace_id), grace=5)
        shutil.rmtree(run_dir, ignore_errors=True)
