"""Supervisor of one local workspace: runs the workers, splits their output per worker,
recovers them when they fail (up to the workspace's retry budget, each recovery noted
in history.jsonl), and records its own pid and the final exit code in the run directory.

Two ways to run: a torchrun group (DDP; a failure restarts the whole group from the
newest checkpoint), or a pool of single workers (elastic DiLoCo, core.backends.local.worker_pool).

Started detached (its own session, re-parented to init) so that the workspace
outlives the app or CLI that launched it, and any later process can read its state.

    python -m core.backends.local.supervisor RUN_DIR
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from core.backends.local.run_history import RunHistory
from core.backends.local.worker_pool import WorkerPool, describe_exit, pool_environment, recoveries_used
from core.state.atomic_files import write_atomically
from core.state.secret_store import SecretStore, redact

RANK_PREFIX = re.compile(r"^\[[A-Za-z_]*?(\d+)\]:(.*)$")
MARKER = "GEOTRAIN_WORKSPACE"


def workspace_processes(workspace_id: str, exclude: int | None = None) -> list[psutil.Process]:
    """Every live process launched for the workspace (found by its environment marker)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid in (os.getpid(), exclude):
            continue
        try:
            if proc.environ().get(MARKER) == workspace_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def kill_all(processes: list[psutil.Process], grace: float) -> None:
    for proc in processes:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)


class Demux:
    """Writes torchrun's `[defaultN]:line` output to logs/worker-N.log, the rest to launcher.log."""

    def __init__(self, log_dir: Path, history: RunHistory | None = None,
                 secrets: list[str] | None = None) -> None:
        self.log_dir = log_dir
        self.history = history
        self.secrets = secrets or []
        self.files: dict[str, object] = {}

    def _file(self, name: str):
        if name not in self.files:
            self.files[name] = open(self.log_dir / f"{name}.log", "a", buffering=1)
        return self.files[name]

    def line(self, text: str) -> None:
        text = redact(text, self.secrets) if self.secrets else text
        match = RANK_PREFIX.match(text)
        if match:
            worker = f"worker-{match.group(1)}"
            self._file(worker).write(match.group(2) + "\n")
            if self.history is not None:
                self.history.worker_line(worker, match.group(2))
        else:
            self._file("launcher").write(text + "\n")

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()


def run(run_dir: Path) -> int:
    launch = json.loads((run_dir / "launch.json").read_text())
    env = dict(os.environ)
    env.update(launch["env"])
    store = SecretStore(Path(launch["secrets_path"]))
    values = []
    for var, ref in launch.get("secret_refs", {}).items():
        value = store.get(ref)
        if value:
            env[var] = value
            values.append(value)
    write_atomically(run_dir / "supervisor.pid", str(os.getpid()))
    history = RunHistory(run_dir, int(launch.get("workers", 1)))
    history.starting()

    def stop(signum, _frame):
        kill_all(workspace_processes(launch["workspace_id"]), 10)
        write_atomically(run_dir / "exit_code", str(128 + signum))
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if launch.get("mode") == "elastic":
        code = WorkerPool(run_dir, launch, pool_environment(env), history, values).run()
    else:
        code = run_group(run_dir, launch, env, history, values)
    write_atomically(run_dir / "exit_code", str(code))
    return code


def run_group(run_dir: Path, launch: dict, env: dict[str, str], history: RunHistory,
              secrets: list[str]) -> int:
    """torchrun until it succeeds or the retry budget is spent; each restart resumes from
    the newest complete checkpoint (recipes.train does that on start)."""
    budget, used = int(launch.get("max_recoveries", 0)), recoveries_used(run_dir, launch)
    while True:
        demux = Demux(run_dir / "logs", history, secrets)
        child = subprocess.Popen(launch["argv"], cwd=run_dir, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 errors="replace")
        assert child.stdout is not None
        for raw in child.stdout:
            demux.line(raw.rstrip("\n"))
        code = child.wait()
        demux.close()
        if code == 0:
            return 0
        workers = sorted(history.last_step) or ["worker-0"]
        cause = f"the torchrun group {describe_exit(code)}{_first_failure(run_dir)}"
        if used >= budget:
            history.add("gave_up", workers=workers, cause=cause, budget=budget)
            return code
        used += 1
        history.failed(workers, cause, used, budget, "group")


def _first_failure(run_dir: Path) -> str:
    """torchrun names the worker that failed first and how (its error summary)."""
    try:
        text = (run_dir / "logs" / "launcher.log").read_text(errors="replace")
    except FileNotFoundError:
        return ""
    found = re.findall(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", text, re.S)
    if not found:
        return ""
    rank, code = found[-1]
    return f" (worker-{rank} {describe_exit(int(code))})"


def daemonize() -> None:
    """Fork away from the launching process so init, not it, reaps us."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def main(argv: list[str]) -> int:
    run_dir = Path(argv[-1]).resolve()
    if "--daemonize" in argv:
        daemonize()
    try:
        return run(run_dir)
    except Exception as exc:  # a supervisor crash must still leave an exit code behind
        (run_dir / "logs" / "launcher.log").open("a").write(f"supervisor error: {exc}\n")
        write_atomically(run_dir / "exit_code", "70")
        return 70


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
