"""A local workspace's worker processes, one level down (issue 43's drill-down): each rank's pid,
state, restarts and last events, a `describe`-like detail, and a shell in a worker's environment.

The supervisor writes each live worker's pid to workers.json; a pid is believed only when that
process carries the workspace's marker and the rank in its environment (a pid can be reused by
any process once ours ended, and the run directory is writable by the workers).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

from core.backends.base import ShellTarget, WorkerProcess
from core.backends.local.kept_failures import read_kept
from core.backends.local.run_history import read_history, read_phase
from core.backends.local.supervisor import MARKER
from core.domain.run_events import describe_record, natural_key
from core.domain.terminal_text import printable
from core.errors import InvalidInput, NotFound

EVENTS_SHOWN = 5
LOG_LINES_SHOWN = 3
LOG_TAIL_BYTES = 4096
SECRET_VARS = ("WANDB_API_KEY", "HF_TOKEN")  # the tokens a worker may get (core.workspaces)
SHOWN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GEOTRAIN_RECOVERY", "WANDB_MODE", "PYTHONPATH",
              "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME")


def _pids(run_dir: Path) -> dict[str, int]:
    """workers.json's rank -> pid, only well-formed entries (the file is in the workers' reach)."""
    try:
        saved = json.loads((run_dir / "workers.json").read_text()[:65536])
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(saved, dict):
        return {}
    return {k: v for k, v in saved.items() if isinstance(k, str) and (k.isdigit() and len(k) < 7 or k == "spare")
            and isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 22}


def _our_process(pid: int | None, workspace_id: str, rank: str):
    """The live psutil.Process if it is this workspace's worker of that rank, else None."""
    import psutil

    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        env = proc.environ()
        if env.get(MARKER) == workspace_id and (rank == "spare" or env.get("RANK") == rank) \
                and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except psutil.Error:
        pass
    return None


def _about(record: dict, name: str) -> bool:
    return record.get("worker") == name or name in (record.get("workers") or [])


def _event_line(record: dict) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(record["at"])) if isinstance(record.get("at"), float) else "-"
    try:
        said = describe_record(record)
    except (KeyError, TypeError, ValueError):  # a record of an older shape: its kind alone
        said = ""
    return printable(f"{when} {record.get('kind')}{said}")[:300]


def _log_tail(path: Path) -> list[str]:
    try:
        with open(path, "rb") as handle:
            start = max(0, path.stat().st_size - LOG_TAIL_BYTES)
            handle.seek(start)
            lines = handle.read(LOG_TAIL_BYTES).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return [printable(line)[:200] for line in lines[1 if start else 0:][-LOG_LINES_SHOWN:]]  # a cut first line out


def _process_detail(proc) -> list[tuple[str, str]]:
    import psutil

    try:
        with proc.oneshot():
            env = proc.environ()
            times, memory = proc.cpu_times(), proc.memory_info()
            rows = [("process", f"{proc.status()}, started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(proc.create_time()))}"),
                    ("command", shlex.join(proc.cmdline())), ("cwd", proc.cwd()),
                    ("cpu time", f"{times.user:.1f}s user, {times.system:.1f}s system"),
                    ("memory", f"{memory.rss / 2 ** 20:.0f} MiB resident"), ("threads", str(proc.num_threads()))]
    except psutil.Error:
        return [("process", "ended while being read")]
    rows += [(f"env {var}", env[var]) for var in SHOWN_VARS if var in env]
    rows += [(f"env {var}", "(set; hidden)") for var in SECRET_VARS if var in env]
    return [(key, printable(value)[:400]) for key, value in rows]


def list_processes(run_dir: Path, workspace_id: str) -> list[WorkerProcess]:
    """Every worker the run knows (its logs, the supervisor's phase, workers.json), rank order."""
    if not run_dir.exists():
        raise NotFound(f"workspace {workspace_id!r} has no files on this machine")
    pids, phase, history = _pids(run_dir), read_phase(run_dir) or {}, read_history(run_dir)
    known = phase.get("workers") if isinstance(phase.get("workers"), dict) else {}
    names = {f"worker-{rank}" for rank in pids if rank.isdigit()} | {n for n in known if isinstance(n, str)}
    names |= {p.stem for p in (run_dir / "logs").glob("worker-*.log")}
    ended = (run_dir / "exit_code").exists()
    rows = [_row(run_dir, workspace_id, name, pids, known, history, ended)
            for name in sorted(names, key=natural_key)]
    if "spare" in pids and (proc := _our_process(pids["spare"], workspace_id, "spare")) is not None:
        rows.append(WorkerProcess("spare", None, "STANDBY", proc.pid, detail=_process_detail(proc)))
    return rows + [_kept_row(kept) for kept in read_kept(run_dir)]


def _kept_row(kept: dict) -> WorkerProcess:
    """A failed worker process kept by recovery.keep_failed_pods (core.backends.local.kept_failures)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(kept["at"]))
    log = Path(kept["path"]) / "output.log"
    detail = [("process", printable(f"{kept.get('how', '')}, at {when}")[:200]),
              ("pid", str(kept.get("pid"))), ("kept in", kept["path"]), ("output", str(log))]
    detail += [("last output", line) for line in _log_tail(log)]
    return WorkerProcess(kept["name"], None, "FAILED (kept)", None, events=[printable(f"{when} exited: {kept.get('how', '')}")[:300]],
                         detail=detail)


def _row(run_dir: Path, workspace_id: str, name: str, pids: dict[str, int], known: dict, history: list[dict],
         ended: bool) -> WorkerProcess:
    rank = name.removeprefix("worker-")
    proc = _our_process(pids.get(rank), workspace_id, rank)
    said = known.get(name) if isinstance(known.get(name), list) else []
    state = str(said[0]) if said else ("ENDED" if ended else "PENDING")
    if proc is None and state in ("RUNNING", "PENDING") and ended:
        state = "ENDED"
    restarts = sum(1 for r in history if r.get("kind") == "recovery" and _about(r, name))
    events = [_event_line(r) for r in history if _about(r, name)][-EVENTS_SHOWN:]
    detail = _process_detail(proc) if proc is not None else [("process", "not running")]
    if len(said) > 1 and said[1]:
        detail.insert(0, ("phase", printable(str(said[1]))[:300]))
    detail.append(("log", str(run_dir / "logs" / f"{name}.log")))
    detail += [("last output", line) for line in _log_tail(run_dir / "logs" / f"{name}.log")]
    return WorkerProcess(name, int(rank) if rank.isdigit() else None, printable(state)[:40],
                         proc.pid if proc is not None else None, restarts=restarts, events=events, detail=detail)


def worker_shell(run_dir: Path, workspace_id: str, rank: int, shell: str) -> ShellTarget:
    """`shell` with the environment and working directory of worker `rank`: the live process's own
    (read from /proc through psutil), or, once it ended, the one the supervisor gave it (launch.json,
    its tokens from the secret store). The workspace marker is left out, so that stopping the
    workspace does not take the shell for one of its workers."""
    if not (run_dir / "launch.json").exists():
        raise NotFound(f"workspace {workspace_id!r} has no files on this machine")
    launch = _launch(run_dir, workspace_id)
    workers = int(launch.get("workers", 1))
    if not 0 <= rank < workers:
        raise InvalidInput(f"--rank {rank} is not a worker of {workspace_id} (it has ranks 0-{workers - 1})",
                           "pick a rank from `geotrain workspaces pods ID`")
    proc = _our_process(_pids(run_dir).get(str(rank)), workspace_id, str(rank))
    if proc is not None:
        import psutil

        try:
            env, cwd, how = proc.environ(), proc.cwd(), f"pid {proc.pid}"
        except psutil.Error:
            proc = None
    if proc is None:
        env, cwd, how = _launched_env(launch, rank, workspace_id), str(run_dir), "not running: as it was launched"
    env = {k: v for k, v in env.items() if k != MARKER}
    for var in ("TERM", "COLORTERM", "LANG", "HOME", "USER"):  # this terminal's, where the worker had none
        if var in os.environ and var not in env:
            env[var] = os.environ[var]
    env["GEOTRAIN_SHELL"] = f"worker-{rank} of {workspace_id}"
    return ShellTarget([shell], env, cwd, f"worker-{rank} of {workspace_id} ({how})")


LAUNCH_BYTES = 1 << 20  # the supervisor's launch.json is a few KiB
# what the backend puts in a worker's environment (core.backends.local.backend._env): launch.json
# is in the workers' reach, so a shell on an ended rank takes only these from it, never a loader or
# shell start-up variable (LD_PRELOAD, BASH_ENV) planted there
LAUNCHED_VARS = ("PYTHONUNBUFFERED", "PYTHONPATH", "WANDB_MODE", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def _launch(run_dir: Path, workspace_id: str) -> dict:
    try:
        with open(run_dir / "launch.json", "rb") as fh:
            launch = json.loads(fh.read(LAUNCH_BYTES + 1)[:LAUNCH_BYTES])
    except (OSError, ValueError, RecursionError):
        launch = None
    if not isinstance(launch, dict):
        raise InvalidInput(f"workspace {workspace_id!r}'s launch.json is unreadable",
                           f"delete the workspace with `geotrain workspaces delete {workspace_id}`")
    return launch


def _launched_env(launch: dict, rank: int, workspace_id: str) -> dict[str, str]:
    from core.state import paths
    from core.state.secret_store import SecretStore

    env = dict(os.environ)
    saved = launch.get("env") if isinstance(launch.get("env"), dict) else {}
    env.update({k: str(v) for k, v in saved.items() if k in LAUNCHED_VARS or k.startswith("GEOTRAIN_")})
    env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(launch.get("workers", 1)),
                "LOCAL_WORLD_SIZE": str(launch.get("workers", 1)), "GROUP_RANK": "0"})
    store = SecretStore(paths.secrets_path())  # geotrain's own store, never a path the file names
    refs = launch.get("secret_refs") if isinstance(launch.get("secret_refs"), dict) else {}
    for var in SECRET_VARS:  # this workspace's own tokens only (core.workspaces stores "<id>/<token>")
        ref = refs.get(var)
        if isinstance(ref, str) and ref.startswith(f"{workspace_id}/") and ref.count("/") == 1:
            value = store.get(ref)
            if value:
                env[var] = value
    return env
