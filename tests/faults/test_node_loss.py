"""Every worker of a local workspace killed at once (as losing the node would): the
supervisor brings the workspace back from the newest complete checkpoint, losing at
most one checkpoint interval; a checkpoint truncated on purpose is skipped with a
warning, never loaded. Then the supervisor itself dies with its workers (a reboot):
the service's recovery check starts a new one, which resumes from the checkpoints."""

import os
import signal
from pathlib import Path

import psutil
import pytest

from core.backends.local.supervisor import kill_all, workspace_processes

from core.workspaces import WorkspaceService
from tests.faults.faults import deploy, last_step, wait_done, wait_for, worker_pids

pytestmark = pytest.mark.slow
STEPS, INNER, EVERY = 80, 4, 8


def _newest_checkpoint(run_dir: Path, rank: int) -> Path | None:
    found = sorted((run_dir / "out" / "checkpoints").glob(f"step_*/rank_{rank}.json"))
    return found[-1].with_suffix(".pt") if found else None


def test_all_workers_killed_come_back_from_newest_checkpoint(geotrain_home):
    service = WorkspaceService()
    ws = deploy(service, preset="low", workers=3, steps=STEPS, inner=INNER, every=EVERY)
    run_dir = Path(ws.run_dir)
    wait_for(lambda: (p := _newest_checkpoint(run_dir, 0)) and int(p.parent.name[5:]) >= 2 * EVERY,
             240, "two checkpoints")

    truncated = _newest_checkpoint(run_dir, 0)
    data = truncated.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])  # as a copy cut off mid-write would be
    pids = worker_pids(run_dir)
    reached = max(last_step(run_dir, r) for r in range(3))
    for pid in pids.values():
        os.kill(pid, signal.SIGKILL)

    recovered = wait_for(lambda: [e for e in service.events(ws.id) if e["kind"] == "recovered"],
                         240, "the workspace to train again")

    supervisor = psutil.Process(int((run_dir / "supervisor.pid").read_text()))
    supervisor.kill()
    kill_all(workspace_processes(ws.id), grace=0)
    state = service.status(ws.id)  # what `geotrain workspaces list/show` and the app run
    assert state.status in ("PENDING", "PREPARING_DATA", "RENDEZVOUS", "RUNNING"), state
    assert int((run_dir / "supervisor.pid").read_text()) != supervisor.pid
    assert wait_done(service, ws.id) == "COMPLETED"

    history = service.events(ws.id)
    recoveries = [e for e in history if e["kind"] == "recovery"]
    assert len(recoveries) == 2 and recoveries[0]["scope"] == "group", history
    assert recoveries[1]["scope"] == "workspace" and recoveries[1]["cause"] == "the supervisor process vanished"
    assert "worker-0 killed by SIGKILL" in recoveries[0]["cause"]
    restart = recovered[0]["restarted_at_step"]
    assert restart % EVERY == 0 and reached - restart <= EVERY, (reached, recovered)
    assert recovered[0]["steps_lost"] <= EVERY

    log0 = (run_dir / "logs" / "worker-0.log").read_text()
    assert f"checkpoint {truncated} is truncated or corrupt" in log0
    assert f"resumed from checkpoint at step {int(truncated.parent.name[5:])}" not in log0
    assert log0.count("resumed from checkpoint at step") >= 2  # once per recovery
