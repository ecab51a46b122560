"""Hierarchical DiLoCo on the local cluster (2 datacenters x 2 workers): kill -9 one worker
inside a datacenter mid-run. Its datacenter cannot step without it (its gradients are
all-reduced every step), so the supervisor brings the torchrun group back from the newest
complete checkpoint; the run completes with every rank on the same global weights."""

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from core.workspaces import WorkspaceService
from tests.faults.faults import deploy, last_step, torchrun_workers, wait_done, wait_for

pytestmark = pytest.mark.slow
STEPS, INNER, EVERY, WORKERS = 40, 4, 8, 4


def _checkpoints(run_dir: Path) -> list[int]:
    """Steps whose checkpoint every rank has written: rank 3's alone left a race, the victim not yet
    holding that step, so the group restarted from scratch and never said it resumed."""
    steps = (run_dir / "out" / "checkpoints").glob("step_*")
    return sorted(int(d.name[5:]) for d in steps if all((d / f"rank_{r}.json").exists() for r in range(WORKERS)))


def test_lost_worker_inside_a_datacenter_is_recovered(geotrain_home):
    service = WorkspaceService()
    ws = deploy(service, preset="medium", workers=WORKERS, steps=STEPS, inner=INNER, every=EVERY,
                extra=("datacenters=2", "data.batch_size=2", "data.seq_len=16"))
    run_dir = Path(ws.run_dir)
    wait_for(lambda: _checkpoints(run_dir) and _checkpoints(run_dir)[-1] >= EVERY, 300, "a checkpoint")
    victim = next(p for p in torchrun_workers(ws.id) if p.environ().get("RANK") == "1")
    reached = max(last_step(run_dir, r) for r in range(WORKERS))
    os.kill(victim.pid, signal.SIGKILL)

    recovered = wait_for(lambda: [e for e in service.events(ws.id) if e["kind"] == "recovered"],
                         300, "the workspace to train again")[0]
    assert wait_done(service, ws.id, timeout=400) == "COMPLETED"
    recoveries = [e for e in service.events(ws.id) if e["kind"] == "recovery"]
    assert len(recoveries) == 1 and recoveries[0]["scope"] == "group"
    assert "worker-1" in recoveries[0]["cause"]
    assert recovered["restarted_at_step"] % EVERY == 0 and reached - recovered["restarted_at_step"] <= EVERY + 1

    log1 = (run_dir / "logs" / "worker-1.log").read_text()
    assert log1.count("hierarchical DiLoCo: datacenter dc0 (1 of 2), rank 1 of 2 there") >= 2
    assert "resumed from checkpoint at step" in log1
    final = run_dir / "out" / "checkpoints" / f"step_{STEPS:08d}"
    states = [torch.load(final / f"rank_{r}.pt", weights_only=True) for r in range(WORKERS)]
    for state in states[1:]:
        assert torch.equal(state["algorithm"]["global"], states[0]["algorithm"]["global"])
    result = json.loads((run_dir / "out" / "result.json").read_text())
    assert result["step"] == STEPS and result["lan_bytes"] > 0 and result["bytes_sent"] > 0
