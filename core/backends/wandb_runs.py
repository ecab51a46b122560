"""W&B as users expect: one project per workspace unless the detailed config names one,
the run's URL (online) or its folder and `wandb sync` command (offline), and the sync
itself once a key is given later.

The recipe (recipes/telemetry.py) writes `out/wandb_run.json` when its run starts:
{"mode": "online"|"offline", "url": …, "sync_dir": …, "project": …, "id": …}. Every start
(a restart or recovery continues the same run id) logs to a folder of its own, so an offline
run is every `offline-run-…-ID` folder in the workspace's wandb folder, uploaded oldest first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from core.errors import BackendError, InvalidInput

RUN_FILE = "wandb_run.json"
MAX_RUN_FILE = 64 * 1024  # a few short fields; a bigger file is not the one the recipe wrote
MAX_SEGMENTS = 1000  # one folder per start of the run: restarts, recoveries
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # wandb's run ids (the recipe's: 16 hex digits)


def project_for(workspace_id: str) -> str:
    return f"geotrain-{workspace_id}"


def assign_project(config: dict[str, Any], workspace_id: str) -> None:
    """Give the run a project of its own when the config leaves `logging.wandb_project` null."""
    logging = config.setdefault("logging", {})
    if isinstance(logging, dict) and not logging.get("wandb_project"):
        logging["wandb_project"] = project_for(workspace_id)


def _read_small_json(path: Path) -> Any:
    """The JSON in a run file the pod wrote: at most MAX_RUN_FILE bytes, never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return {}
            data = handle.read(MAX_RUN_FILE + 1)
        if len(data) > MAX_RUN_FILE:
            return {}
        return json.loads(data.decode("utf-8", "replace"))
    except (OSError, ValueError, RecursionError):
        return {}


def describe(result_files: dict[str, Path], config: dict[str, Any]) -> dict[str, Any] | None:
    """What `workspaces show` and the app say about the run; None when W&B is off."""
    logging = config.get("logging") or {}
    if logging.get("wandb") is False:
        return None
    info: dict[str, Any] = {"project": logging.get("wandb_project"),
                            "mode": "not started" if result_files else "in the pods"}
    path = result_files.get(RUN_FILE)
    if path is not None and path.is_file() and not path.is_symlink():
        written = _read_small_json(path)
        if isinstance(written, dict):  # written by the workspace's own process: the project
            info.update({k: str(v) for k, v in written.items()  # stays the spec's
                         if k in ("mode", "url", "sync_dir", "id") and v})
    if info.get("sync_dir") and not own_run_dir(info["sync_dir"], result_files.get("wandb")):
        info["sync_refused"] = info.pop("sync_dir")
    segments = offline_segments(info.get("id"), result_files.get("wandb"))
    if info.get("mode") == "offline" and info.get("sync_dir") and info["sync_dir"] not in segments:
        segments.append(info["sync_dir"])
    if segments:  # an online run's earlier offline starts are uploaded the same way
        info["sync_dirs"] = segments
        info["sync_command"] = shlex.join(["wandb", "sync", *segments])
        info["uploaded"] = [f for f in segments if uploaded(f)]
    return info


def uploaded(folder: str) -> bool:
    """wandb sync has uploaded this run folder: it leaves `<run>.wandb.synced` beside the run's file
    (a plain file, not a link) and skips the folder next time."""
    try:
        with os.scandir(folder) as entries:
            return any(e.name.endswith(".wandb.synced") and e.is_file(follow_symlinks=False) for e in entries)
    except OSError:
        return False


def offline_segments(run_id: str | None, wandb_dir: Path | None) -> list[str]:
    """The run's offline folders in this workspace's wandb folder, oldest first: one per start that
    logged offline (wandb names them offline-run-YYYYMMDD_HHMMSS-ID). Only the newest is named in
    wandb_run.json; uploading only it would lose the history before the last restart."""
    if not run_id or not _RUN_ID.fullmatch(run_id) or wandb_dir is None:
        return []
    name = re.compile(r"offline-run-[0-9]{8}_[0-9]{6}-" + re.escape(run_id))
    try:
        with os.scandir(wandb_dir) as entries:
            names = sorted(e.name for e in entries if name.fullmatch(e.name))
    except OSError:
        return []
    folders = [str(Path(wandb_dir) / n) for n in names[-MAX_SEGMENTS:]]
    return [f for f in folders if own_run_dir(f, Path(wandb_dir))]


def own_run_dir(sync_dir: str, wandb_dir: Path | None) -> bool:
    """`sync_dir` is a folder inside this workspace's own wandb folder, with no link on the
    way (the file naming it is written by the workspace; another workspace's run is refused)."""
    if wandb_dir is None:
        return False
    wandb_dir, run = Path(wandb_dir), Path(sync_dir)
    if not run.is_absolute() or ".." in run.parts:
        return False
    try:
        rel = run.relative_to(wandb_dir)
    except ValueError:
        return False
    if not rel.parts:
        return False
    on_the_way = [wandb_dir.parent, wandb_dir] + [wandb_dir.joinpath(*rel.parts[:i + 1]) for i in range(len(rel.parts))]
    if any(os.path.islink(p) or not os.path.isdir(p) for p in on_the_way):  # out/, wandb/, the run
        return False
    return run.resolve().is_relative_to(wandb_dir.resolve())


def summary(info: dict[str, Any] | None, workspace_id: str, short: bool = False) -> str:
    """One line for `workspaces show`; `short` for the app's detail (a narrow box)."""
    if info is None:
        return "W&B: off"
    segments = info.get("sync_dirs") or []
    # one folder: wandb's own command fits the line; several (one per start): geotrain's, which finds them
    command = (f"`{info['sync_command']}` or " if len(segments) == 1 else "") + f"`geotrain workspaces sync {workspace_id}`"
    if info.get("url"):
        waiting = [f for f in segments if f not in info.get("uploaded", [])]
        if waiting:  # restarts that logged offline before the latest one came online, not uploaded yet
            parts = f"{len(waiting)} offline part{'s' if len(waiting) > 1 else ''}"
            if short:
                return f"W&B: {info['url']}; {parts}: geotrain workspaces sync {workspace_id}"
            return f"W&B: {info['url']}; {parts} of it (starts that logged offline) still to upload: {command}"
        return f"W&B: {info['url']}"
    if info.get("sync_refused"):
        return f"W&B: the run folder {info['sync_refused']} it names is outside its wandb folder; not synced"
    if info.get("mode") == "offline" and segments:
        if short:  # the app's box is narrow: geotrain's own command, which finds the folders
            return f"W&B offline; upload: geotrain workspaces sync {workspace_id}"
        where = (f"in {segments[0]}" if len(segments) == 1 else
                 f"in {len(segments)} folders, one per start, the newest {segments[-1]}")
        return f"W&B: offline run {where} (project {info.get('project')}); upload it with {command}"
    project = f"project {info['project']}" if info.get("project") else "no project named"
    if info.get("mode") == "in the pods":
        return f"W&B: {project}; rank 0's log names the run (`geotrain workspaces logs {workspace_id}`)"
    return f"W&B: {project}; no run recorded yet"


def sync_argv(sync_dirs: list[str], project: str | None) -> list[str]:
    """The `wandb sync` call; the key is never part of it (WANDB_API_KEY in the environment). wandb
    uploads folders of one run one after another in the order they started; ones already uploaded
    are skipped, so a second sync sends only what is new."""
    argv = [sys.executable, "-m", "wandb", "sync"]
    if project:
        argv += ["--project", project]
    return argv + ["--", *sync_dirs]


def check_syncable(info: dict[str, Any] | None) -> None:
    if info is not None and info.get("sync_refused"):
        raise InvalidInput(f"the offline run folder {info['sync_refused']} is not inside this workspace's wandb folder",
                           "export the workspace, then run `wandb sync` on the export's wandb/ folder")
    if info is None or not info.get("sync_dirs"):
        raise InvalidInput("this workspace has no offline W&B run to sync",
                           "an online run is uploaded as it trains; see `geotrain workspaces show`")
    for folder in info["sync_dirs"]:
        if not Path(folder).is_dir():
            raise InvalidInput(f"the offline run folder {folder} is not on this machine",
                               "export the workspace, then run `wandb sync` on the export's wandb/ folder")


def sync(info: dict[str, Any] | None, key: str | None,
         run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str:
    """Upload an offline run with `key`; the output of wandb (it names the run's URL)."""
    check_syncable(info)
    if not key:
        raise InvalidInput("no W&B API key", "set WANDB_API_KEY, or pass --ask-key to type it (hidden)")
    env = dict(os.environ, WANDB_API_KEY=key)
    env.pop("WANDB_MODE", None)
    try:
        done = run(sync_argv(info["sync_dirs"], info.get("project")), env=env, capture_output=True,
                   text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise BackendError("wandb sync did not finish in 10 minutes",
                           "check the network and WANDB_BASE_URL, then run `geotrain workspaces sync` again") from None
    output = (done.stdout + done.stderr).replace(key, "***")
    errors = [ln for ln in output.splitlines() if "ERROR" in ln]  # wandb sync exits 0 on a refused key
    if done.returncode != 0 or errors:
        last = (errors or [ln for ln in output.splitlines() if ln.strip()] or [f"exit code {done.returncode}"])[-1]
        raise BackendError(f"wandb sync failed: {last.removeprefix('wandb: ').strip()[:300]}",
                           "check the key and WANDB_BASE_URL, then run `geotrain workspaces sync` again")
    return output
