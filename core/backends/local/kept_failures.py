"""recovery.keep_failed_pods on local: each failed worker's own output and exit, kept apart.

A worker's log (logs/worker-N.log) goes on after a recovery, so the failed process's lines end up
between those of its replacement; with keep_failed_pods the supervisor copies what that process
wrote (from the log's size when it started, the last KEPT_LOG_BYTES at most) with how it ended into
kept/worker-N.K/ in the run directory (0700), where `workspaces pods` lists it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

from core.state.atomic_files import write_atomically

KEPT_DIR = "kept"
KEPT_LOG_BYTES = 8 << 20
RECORD_BYTES = 4096  # an exit.json is ~150 bytes
KEPT_NAME = re.compile(r"(worker-[0-9]{1,6})\.([0-9]{1,6})")


def log_size(run_dir: Path, name: str) -> int:
    """Where a new process's output will start in its log (appended there)."""
    try:
        return (run_dir / "logs" / f"{name}.log").stat().st_size
    except OSError:
        return 0


def keep_failure(run_dir: Path, name: str, since: int, code: int, how: str, pid: int | None,
                 attempt: int) -> Path | None:
    """Copy the failed process's output and exit into kept/<name>.<K>/; None when kept/ is not a
    plain directory of ours (the workers run in the run directory and could have put a link there)."""
    base = run_dir / KEPT_DIR
    try:
        base.mkdir(mode=0o700)
    except FileExistsError:
        pass
    if base.is_symlink() or not base.is_dir():
        return None
    index = 1 + max((int(m[2]) for p in base.iterdir() if (m := KEPT_NAME.fullmatch(p.name)) and m[1] == name),
                    default=-1)
    target = base / f"{name}.{index}"
    target.mkdir(mode=0o700)
    log = run_dir / "logs" / f"{name}.log"
    fd = os.open(target / "output.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as out:
        try:
            with open(log, "rb") as handle:
                handle.seek(max(since, log.stat().st_size - KEPT_LOG_BYTES))
                out.write(handle.read(KEPT_LOG_BYTES))  # bounded, should the log grow meanwhile
        except OSError:
            pass
    write_atomically(target / "exit.json", json.dumps({
        "worker": name, "exit_code": code, "how": how, "pid": pid, "attempt": attempt, "at": time.time()}))
    return target


def _read_small(path: Path) -> bytes:
    """A record the workers could have replaced: a regular file of at most RECORD_BYTES, never
    through a link, never waiting on a FIFO (OSError/ValueError otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        data = handle.read(RECORD_BYTES + 1)
    if len(data) > RECORD_BYTES:
        raise ValueError(f"{path.name} is over {RECORD_BYTES} bytes")
    return data


def read_kept(run_dir: Path) -> list[dict]:
    """The kept failures, oldest first, each with its folder's path (well-formed records only)."""
    base = run_dir / KEPT_DIR
    if base.is_symlink() or not base.is_dir():
        return []
    kept = []
    for folder in base.iterdir():
        if not KEPT_NAME.fullmatch(folder.name):
            continue
        try:
            record = json.loads(_read_small(folder / "exit.json"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(record, dict) and isinstance(record.get("at"), float) and isinstance(record.get("exit_code"), int):
            kept.append({**record, "name": folder.name, "path": str(folder)})
    return sorted(kept, key=lambda r: r["at"])
