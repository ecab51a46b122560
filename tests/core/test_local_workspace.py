"""The embedded default end to end: real torchrun processes on gloo, real files."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from core.backends.local.supervisor import workspace_processes
from core.errors import InvalidInput
from core.workspaces import DeployRequest, WorkspaceService

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _wait(service, workspace_id, statuses, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = service.status(workspace_id)
        if state.status in statuses:
            return state
        time.sleep(0.5)
    raise AssertionError(f"{workspace_id} never reached {statuses}; last {state}")


def _cli(*args, env_extra=None, **kwargs):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, **kwargs)


def test_a_set_preset_or_steps_is_what_the_workspace_records(geotrain_home):
    # --set wins over the flags; the record (list, app) showed the flag's preset while the run took the --set one
    service = WorkspaceService()
    spec = service.build_spec(DeployRequest(preset="low", sets=("gradient_compression=ultra", "steps=30")))
    assert (spec.preset, spec.steps) == ("ultra", 30)
    assert (spec.config["gradient_compression"], spec.config["steps"]) == ("ultra", 30)
    for bad, says in (("gradient_compression=extreme", "--set gradient_compression"), ("steps=0", "steps")):
        with pytest.raises(InvalidInput) as caught:
            service.build_spec(DeployRequest(sets=(bad,)))
        assert says in str(caught.value.message) + str(caught.value.hint), caught.value


def test_deploy_watch_complete_delete_leaves_nothing(geotrain_home):
    service = WorkspaceService()
    spec = service.build_spec(DeployRequest(steps=40))
    assert (spec.model, spec.size, spec.preset, spec.workers) == ("gpt-neo", "tiny", "medium", 2)
    ws = service.deploy(spec, {})
    lines = list(service.logs(ws.id, follow=True))
    state = _wait(service, ws.id, {"COMPLETED", "FAILED"})
    assert state.status == "COMPLETED", lines[-20:]
    workers = {worker for worker, _ in lines}
    assert {"worker-0", "worker-1"} <= workers
    assert any("loss" in line for worker, line in lines if worker == "worker-1")
    listed = {w.id: w for w in service.list()}
    assert listed[ws.id].status == "COMPLETED" and listed[ws.id].last_loss is not None
    assert [w.status for w in state.workers] == ["COMPLETED", "COMPLETED"]
    run_dir = Path(ws.run_dir)
    assert (run_dir / "out" / "metrics.jsonl").exists()

    service.delete(ws.id)
    assert not run_dir.exists()
    assert workspace_processes(ws.id) == []
    assert [w.id for w in service.list()] == []


def test_delete_while_running_stops_every_process(geotrain_home):
    service = WorkspaceService()
    ws = service.deploy(service.build_spec(DeployRequest(steps=100000)), {})
    _wait(service, ws.id, {"RUNNING"})
    deadline = time.time() + 60
    while len(workspace_processes(ws.id)) < 3 and time.time() < deadline:
        time.sleep(0.3)
    pids = [p.pid for p in workspace_processes(ws.id)]
    assert len(pids) >= 3  # torchrun + 2 workers (the supervisor has no marker in its own env)
    service.delete(ws.id)
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert alive == []
    assert not Path(ws.run_dir).exists()


def test_cli_killed_while_following_then_reattached(geotrain_home):
    out = _cli("workspaces", "deploy", "distributed-training", "--cluster", "local",
               "--steps", "150", "--json")
    assert out.returncode == 0, out.stderr
    import json

    workspace_id = json.loads(out.stdout)["id"]
    follower = subprocess.Popen([sys.executable, "-m", "core.cli", "workspaces", "logs", workspace_id,
                                 "--follow"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert follower.stdout is not None
    first = follower.stdout.readline()
    assert first.startswith("[")
    follower.send_signal(signal.SIGKILL)
    follower.wait()
    listed = _cli("workspaces", "list", "--json")
    status = {w["id"]: w["status"] for w in json.loads(listed.stdout)}[workspace_id]
    assert status in ("PENDING", "PREPARING_DATA", "RENDEZVOUS", "RUNNING")
    again = _cli("workspaces", "logs", workspace_id, "--follow")
    assert again.returncode == 0
    assert "[worker-0]" in again.stdout and "[worker-1]" in again.stdout
    listed = _cli("workspaces", "list", "--json")
    assert {w["id"]: w["status"] for w in json.loads(listed.stdout)}[workspace_id] == "COMPLETED"
    assert _cli("workspaces", "delete", workspace_id, "--yes").returncode == 0


def test_token_never_reaches_argv_logs_or_database(geotrain_home):
    token = "wandb-secret4f9a8b7c6d5e0123456789abcdef0123456789ab"  # well-formed: 40+ after the prefix
    out = _cli("workspaces", "deploy", "distributed-training", "--steps", "60", "--json",
               "--wandb-token", token, env_extra={"WANDB_MODE": "offline"})
    assert out.returncode == 0, out.stderr
    import json

    workspace_id = json.loads(out.stdout)["id"]
    service = WorkspaceService()
    _wait(service, workspace_id, {"RUNNING"})
    seen = []
    deadline = time.time() + 60
    while time.time() < deadline and len(seen) < 3:
        seen = workspace_processes(workspace_id)
        time.sleep(0.3)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert token not in ps
    _wait(service, workspace_id, {"COMPLETED", "FAILED"})
    for path in Path(geotrain_home).rglob("*"):
        if path.is_file() and path.name != "secrets.json":
            assert token.encode() not in path.read_bytes(), path
    secrets_file = Path(geotrain_home) / "secrets.json"
    assert oct(secrets_file.stat().st_mode & 0o777) == "0o600"
    db = sqlite3.connect(Path(geotrain_home) / "state.sqlite3")
    assert token not in repr(db.execute("SELECT * FROM workspaces").fetchall())
    dry = _cli("workspaces", "deploy", "distributed-training", "--dry-run", "--wandb-token", token)
    assert dry.returncode == 0 and token not in dry.stdout + dry.stderr
    service.delete(workspace_id)
    assert token not in secrets_file.read_text()


def test_cli_deploy_while_another_process_lists(geotrain_home):
    import json

    listers = [subprocess.Popen([sys.executable, "-m", "core.cli", "workspaces", "list", "--json"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(4)]
    deploys = [subprocess.Popen([sys.executable, "-m", "core.cli", "workspaces", "deploy",
                                 "distributed-training", "--steps", "5", "--workers", "1", "--json"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = {}
    for proc in listers + deploys:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs[proc] = json.loads(out)
    deployed = {outputs[p]["id"] for p in deploys}
    service = WorkspaceService()
    assert {ws.id for ws in service.list()} == deployed and len(deployed) == 2
    for workspace_id in deployed:
        _wait(service, workspace_id, {"COMPLETED", "FAILED"})
        service.delete(workspace_id)
