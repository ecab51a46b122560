"""Elastic DiLoCo on the local cluster: kill -9 one of three workers mid-run.

Real processes: three `recipes.train` workers on gloo, their TCPStore, the detached
supervisor. The two survivors average over themselves (their step counters keep
rising), the supervisor restarts the killed one, it rejoins at an outer step with the
global weights, and the run ends with a held-out loss close to an uninterrupted run.
"""

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from core.domain import run_events
from core.workspaces import WorkspaceService
from tests.faults.faults import deploy, last_step, wait_done, wait_for, worker_pids

pytestmark = pytest.mark.slow
STEPS, INNER = 96, 8
LOSS_TOLERANCE = 0.10  # nats of held-out loss, killed run vs uninterrupted run (same seeds)


def _final_globals(run_dir: Path) -> list[torch.Tensor]:
    step_dir = Path(run_dir) / "out" / "checkpoints" / f"step_{STEPS:08d}"
    return [torch.load(step_dir / f"rank_{r}.pt", weights_only=True)["algorithm"]["global"]
            for r in range(3)]


def test_kill_one_of_three_workers_the_others_go_on(geotrain_home):
    service = WorkspaceService()
    killed = deploy(service, preset="low", workers=3, steps=STEPS, inner=INNER)
    reference = deploy(service, preset="low", workers=3, steps=STEPS, inner=INNER)
    run_dir = Path(killed.run_dir)

    wait_for(lambda: min(last_step(run_dir, r) for r in range(3)) >= 2 * INNER + 2, 240,
             "all three workers past two outer steps")
    before = {r: last_step(run_dir, r) for r in (0, 2)}
    os.kill(worker_pids(run_dir)[1], signal.SIGKILL)

    recovered = wait_for(lambda: [e for e in service.events(killed.id) if e["kind"] == "recovered"],
                         240, "worker-1 to train again")[0]
    # While worker-1 was gone the others finished outer steps on their own.
    assert recovered["worker"] == "worker-1" and recovered["outer_step"] >= 3
    # worker-1 took the step count from the survivors: theirs rose while it was gone.
    assert recovered["restarted_at_step"] > max(before.values())
    survivors_log = (run_dir / "logs" / "worker-0.log").read_text()
    readable = [run_events.readable(line) for line in survivors_log.splitlines()]
    assert "outer step" in str(readable) and "averaged over 2 of 3 (ranks 0, 2)" in str(readable)
    rejoined = (run_dir / "logs" / "worker-1.log").read_text()
    assert '"kind": "rejoined"' in rejoined and '"source": 0' in rejoined

    assert wait_done(service, killed.id) == "COMPLETED"
    assert wait_done(service, reference.id) == "COMPLETED"
    history = service.events(killed.id)
    recoveries = [e for e in history if e["kind"] == "recovery"]
    assert len(recoveries) == 1, history
    assert recoveries[0]["cause"] == "worker-1 killed by SIGKILL"
    assert recoveries[0]["scope"] == "worker"
    assert not [e for e in service.events(reference.id) if e["kind"] == "recovery"]

    globals_ = _final_globals(run_dir)  # the rejoined worker ends on the same global weights
    assert torch.equal(globals_[0], globals_[1]) and torch.equal(globals_[0], globals_[2])
    loss = json.loads((run_dir / "out" / "result.json").read_text())["eval_loss"]
    ref = json.loads((Path(reference.run_dir) / "out" / "result.json").read_text())["eval_loss"]
    print(f"eval loss: killed run {loss:.4f}, uninterrupted {ref:.4f}")
    assert abs(loss - ref) <= LOSS_TOLERANCE


def test_an_ultra_workspace_runs_elastic_with_the_model_synced_whole(geotrain_home):
    # the local cluster runs DiLoCo elastic; its quorum routes whole outer steps, so ultra's fragments give way
    service = WorkspaceService()
    ws = deploy(service, preset="ultra", workers=2, steps=24, inner=8)
    assert wait_done(service, ws.id) == "COMPLETED"
    log = (Path(ws.run_dir) / "logs" / "worker-0.log").read_text()
    assert "preset ultra (diloco, H=8, 1 bits, outer lr 1.2)" in log
    # three whole-model syncs of 1-bit signs + a scale per 1024 values: 16,560 + 520 bytes each
    assert f"done step 24 bytes_sent {3 * (132_480 // 8 + 4 * 130)} outer_step 3" in log
