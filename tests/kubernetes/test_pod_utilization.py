"""Utilization on Kubernetes (issue 43): each rank's `utilization` events, as recipes.telemetry
prints them, read back from its pod's log through the real `kubernetes` client against FakeKubeAPI
(the stand-in API server: a real one cannot run here); `workspaces metrics` and its OpenMetrics
text show them, Prometheus' own parser reads that text. An imitation event (out of range) is not a
figure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from core.backends import kubernetes_utilization
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import run
from tests.kubernetes.test_export_from_pods import _deploy

ROOT = Path(__file__).resolve().parents[2]


def _emitted(rank: int, steps: range) -> bytes:
    """The lines the real telemetry prints for `rank` at each step (recipes.telemetry.Utilization)."""
    code = ("import sys; from recipes.telemetry import Utilization\n"
            f"u = Utilization({rank})\n"
            f"for step in {list(steps)!r}:\n    sum(i * i for i in range(20000)); u.report(step)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    return b"".join(line + b"\n" for line in (done.stdout + done.stderr).splitlines() if b"utilization" in line)


def test_each_ranks_figures_come_from_its_pods_log(fake, kubeconfig, capsys, monkeypatch):
    monkeypatch.setattr(kubernetes_utilization, "READ_EVERY_S", 0.0)
    ws, master, worker = _deploy(fake, kubeconfig, capsys)
    service = WorkspaceService()
    assert service.utilization(ws.id) == {}  # nothing logged yet
    fake.write_log(master, b"[rank 0] step 10/20 loss 3.1416 lr 3.00e-03 outer 0 sent 0.125MB 12.5ms/step\n"
                   + _emitted(0, range(10, 13)))
    fake.write_log(worker, _emitted(1, range(10, 12)))
    fake.write_log(worker, b'geotrain-event {"kind": "utilization", "rank": 1, "step": 99, "wall_s": 1.0, '
                   b'"cpu": 1e9, "wait_s": 0.1}\n')  # an imitation: cpu far out of range

    last = service.utilization(ws.id)
    assert sorted(last) == ["worker-0", "worker-1"]
    assert last["worker-0"]["step"] == 12 and last["worker-1"]["step"] == 11  # the imitation is no figure
    assert 0 < last["worker-0"]["cpu"] and last["worker-0"]["wait_s"] >= 0
    recent = service.utilization_history(ws.id)
    assert [s["step"] for s in recent["worker-0"]] == [10, 11, 12] and len(recent["worker-1"]) == 2

    code, out, err = run(capsys, "workspaces", "metrics", ws.id, "--openmetrics")
    assert code == 0, err
    families = {f.name: f for f in text_string_to_metric_families(out)}
    cpu = [s for f in families.values() for s in f.samples if "cpu" in s.name]
    assert {s.labels.get("worker") for s in cpu} == {"worker-0", "worker-1"}, out


def test_figures_keep_the_last_of_each_rank_however_long_the_log():
    lines = [f'[rank 0] geotrain-event {{"kind": "utilization", "rank": 0, "step": {s}, "wall_s": 1.0, '
             f'"cpu": 0.5, "wait_s": 0.25}}' for s in range(100)]
    kept = kubernetes_utilization.figures_by_worker(lines + ["[rank 0] [red]not markup[/]"])
    assert [s["step"] for s in kept["worker-0"]] == list(range(40, 100))  # UTILIZATION_KEPT, oldest first
    assert kept["worker-0"][-1]["wait_s"] == 0.25
