"""The drill-down on local (issue 43), in the app: from a workspace, `p` lists its worker processes
(rank, pid, state, restarts, last events), the highlighted one's detail below, and `s` runs $SHELL in
that worker's environment and directory, the tokens in its environment and never in its argv.

The worker is a live stand-in process started with a worker's environment (the seeded workspace is a
recording, not a run); the shell is real (a script as $SHELL that writes what it was given). Textual's
headless driver cannot give up the terminal, so App.suspend is replaced by a no-op context here."""

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time

from textual.widgets import DataTable

from core.state import paths
from core.state.secret_store import SecretStore
from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.screens.workspace_processes import WorkspaceProcessesScreen

TOKEN = "wandb-token-0123456789abcdef0123456789abcdef"


def live_worker(run_dir, rank: int) -> subprocess.Popen:
    """A process with worker `rank`'s environment and directory, as the supervisor starts one."""
    env = dict(os.environ, GEOTRAIN_WORKSPACE=states.RUNNING_ID, RANK=str(rank), LOCAL_RANK=str(rank),
               WORLD_SIZE="2", WANDB_API_KEY=TOKEN, GEOTRAIN_RECOVERY="elastic")
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            cwd=run_dir, env=env, stdin=subprocess.DEVNULL)


def prepare(home, tmp_path):
    """The running workspace as the supervisor leaves it: launch.json with its token's reference,
    workers.json naming worker-1's pid, a recovery of worker-1 in its history."""
    run_dir = home / "workspaces" / states.RUNNING_ID
    ref = SecretStore().put(f"{states.RUNNING_ID}/wandb", TOKEN)  # as core.workspaces names it
    (run_dir / "launch.json").write_text(json.dumps({
        "workspace_id": states.RUNNING_ID, "workers": 2, "env": {"PYTHONUNBUFFERED": "1"},
        "secret_refs": {"WANDB_API_KEY": ref}, "secrets_path": str(paths.secrets_path())}))
    with open(run_dir / "history.jsonl", "a") as history:
        history.write(json.dumps({"at": time.time(), "kind": "recovery", "scope": "worker", "workers": ["worker-1"],
                                  "cause": "worker-1 exited with code 1", "attempt": 1, "budget": 3,
                                  "last_steps": {"worker-1": 40}}) + "\n")
    worker = live_worker(run_dir, 1)
    (run_dir / "workers.json").write_text(json.dumps({"1": worker.pid, "0": 1}))  # pid 1: not ours
    shell = tmp_path / "shell.sh"
    said = tmp_path / "shell-said.json"
    shell.write_text(f"#!/bin/sh\n{sys.executable} -c 'import json, os, sys; "
                     f"json.dump({{\"env\": dict(os.environ), \"cwd\": os.getcwd(), \"argv\": sys.argv}}, "
                     f"open(\"{said}\", \"w\"))' \"$0\" \"$@\"\n")
    shell.chmod(0o700)
    return run_dir, worker, shell, said


def test_processes_their_detail_and_a_shell_in_a_workers_environment(app, seeded, tmp_path, monkeypatch):
    _, home = seeded
    run_dir, worker, shell, said = prepare(home, tmp_path)
    monkeypatch.setenv("SHELL", str(shell))
    monkeypatch.setattr(app, "suspend", contextlib.nullcontext)  # the headless driver cannot suspend

    async def run():
        async with app.run_test(size=(130, 44)) as pilot:
            app.push_screen(WorkspaceDetailScreen(states.RUNNING_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            await pilot.press("p")
            await on_screen(pilot, WorkspaceProcessesScreen)
            screen = app.screen
            table = screen.query_one(DataTable)
            await until(pilot, lambda: table.row_count == 2)
            row0, row1 = ([str(c) for c in table.get_row_at(i)] for i in (0, 1))
            assert row0[:2] == ["worker-0", "-"]  # pid 1 in workers.json is not this workspace's worker
            assert row1[:2] == ["worker-1", str(worker.pid)]
            assert row1[4] == "1" and "recovery" in row1[5] and row0[4] == "0"
            await pilot.press("down")
            await until(pilot, lambda: "GEOTRAIN_RECOVERY" in str(screen.query_one("#describe").render()))
            detail = str(screen.query_one("#describe").render())
            secret_line = next(line for line in detail.splitlines() if line.startswith("env WANDB_API_KEY"))
            assert secret_line.split()[-2:] == ["(set;", "hidden)"] and TOKEN not in detail
            assert str(run_dir) in detail and "worker-1 exited with code 1" in detail
            await pilot.press("s")
            await until(pilot, lambda: said.exists() and said.stat().st_size > 0)
            await on_screen(pilot, WorkspaceProcessesScreen)  # back in the app after the shell
    try:
        asyncio.run(run())
    finally:
        worker.kill()
        worker.wait()
    got = json.loads(said.read_text())
    assert got["cwd"] == str(run_dir)
    assert got["env"]["RANK"] == "1" and got["env"]["WANDB_API_KEY"] == TOKEN  # the worker's own environment
    assert "GEOTRAIN_WORKSPACE" not in got["env"]  # stopping the workspace does not take it for a worker
    assert TOKEN not in " ".join(got["argv"])
