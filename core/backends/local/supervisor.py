"""Supervisor of one local workspace: runs the workers, splits their output per worker,
recovers them when they fail (up to the workspace's retry budget, each recovery noted
in history.jsonl), and records its own pid and the final exit code in the run directory.

Two ways to run: a fixed group of workers (DDP, hierarchical DiLoCo; a failure restarts
the whole group from the newest checkpoint; core.backends.local.worker_group), or a pool of
single workers (elastic DiLoCo, core.backends.local.worker_pool). Neither opens a port
that another host or user could reach (core.backends.local.private_stores).

Started detached (its own session, re-parented to init) so that the workspace
outlives the app or CLI that launched it, and any later process can read its state.

    python -m core.backends.local.supervisor RUN_DIR
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil

from core.backends.local.notifier import Notifier
from core.backends.local.run_history import RunHistory, read_history, read_jsonl
from core.backends.local.worker_group import WorkerGroup
from core.backends.local.worker_pool import WorkerPool, pool_environment, recoveries_used
from core.domain.metric_rows import usable
from core.domain.notifications import URL_ENV
from core.state.atomic_files import write_atomically
from core.state.secret_store import SecretStore

MARKER = "GEOTRAIN_WORKSPACE"
# Secrets geotrain's own commands read from the user's shell (the webhook address, workspaces notify; a
# private registry's password, core.cli.deploy_prompts): the shell that started us may hold them, the workers never
SHELL_SECRETS = (URL_ENV, "GEOTRAIN_REGISTRY_PASSWORD")


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


def run(run_dir: Path) -> int:
    launch = json.loads((run_dir / "launch.json").read_text())
    env = {k: v for k, v in os.environ.items() if k not in SHELL_SECRETS}
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
    notifier = Notifier(run_dir, launch["workspace_id"], store, values)
    history.listeners.append(notifier.on_record)
    if launch.get("mode") == "elastic":
        code = WorkerPool(run_dir, launch, pool_environment(env), history, values).run()
    else:
        code = run_group(run_dir, launch, env, history, values)
    write_atomically(run_dir / "exit_code", str(code))
    notifier.finished(code, _outcome(run_dir, code))
    return code


def _outcome(run_dir: Path, code: int) -> str:
    """In a line, for the notification: the last step and loss, or why the run gave up."""
    records = read_history(run_dir)
    if code != 0:
        cause = next((r.get("cause") for r in reversed(records) if r.get("kind") == "gave_up"), None)
        return f"{cause}; exit code {code}" if isinstance(cause, str) else f"exit code {code}"
    rows = usable(read_jsonl(run_dir / "out" / "metrics.jsonl"))
    last = rows[-1] if rows else {}
    if isinstance(last.get("step"), int) and isinstance(last.get("loss"), (int, float)):
        return f"step {last['step']}, loss {last['loss']:.4f}"
    return ""


def run_group(run_dir: Path, launch: dict, env: dict[str, str], history: RunHistory,
              secrets: list[str]) -> int:
    """The worker group until it succeeds or the retry budget is spent; each restart resumes
    from the newest complete checkpoint (recipes.train does that on start)."""
    budget, used = int(launch.get("max_recoveries", 0)), recoveries_used(run_dir, launch)
    attempt = 0
    while True:
        code, failure = WorkerGroup(run_dir, launch, env, history, secrets, attempt).run()
        if code == 0:
            return 0
        with open(run_dir / "logs" / "launcher.log", "a") as log:
            log.write(f"{failure}{_last_error(run_dir, failure.split()[0])}; the group stopped\n")
        workers = sorted(history.last_step) or ["worker-0"]
        cause = f"the worker group failed ({failure})"
        if used >= budget:
            history.add("gave_up", workers=workers, cause=cause, budget=budget)
            return code
        used += 1
        attempt += 1
        history.failed(workers, cause, used, budget, "group")


def _last_error(run_dir: Path, worker: str) -> str:
    """': <the worker's last line that names an error>' (its traceback's last line, usually)."""
    try:
        lines = (run_dir / "logs" / f"{worker}.log").read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    errors = [ln.strip() for ln in lines if "Error" in ln or "error" in ln]
    return f": {errors[-1][:200]}" if errors else ""


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
