"""Each worker's CPU and network-wait figures (issue 43, "utilization while training", local part):
read strictly from its `utilization` event lines, kept by the supervisor, shown by `workspaces show`
and exported as OpenMetrics text that Prometheus's own parser reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from core.backends.local.run_history import UTILIZATION_FILE, RunHistory, read_utilization
from core.domain import openmetrics, run_events

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"rank": 1, "step": 20, "wall_s": 2.0, "cpu": 0.75, "wait_s": 0.5}


def line(**detail) -> str:
    return run_events.EVENT_PREFIX + json.dumps({"kind": "utilization", "at": 1.0, **detail})


def test_a_good_event_gives_its_figures_and_the_wait_as_a_share():
    figures = run_events.utilization(run_events.parse_event("[rank 1] " + line(**GOOD)))
    assert figures == {**GOOD, "wait_ratio": 0.25}
    with_gpu = run_events.utilization(run_events.parse_event(line(**GOOD, gpu=40.0, gpu_memory_bytes=1024)))
    assert (with_gpu["gpu"], with_gpu["gpu_memory_bytes"]) == (40.0, 1024)


@pytest.mark.parametrize("change", [
    {"cpu": None}, {"wait_s": None}, {"wall_s": 0}, {"wall_s": -1.0}, {"cpu": -0.1}, {"cpu": 1e9},
    {"cpu": "90%"}, {"cpu": True}, {"rank": 1.5}, {"rank": -1}, {"gpu": 101.0}, {"gpu": [1]},
    {"gpu_memory_bytes": 1.5}, {"wait_s": 1e300}, {"step": -3},
])
def test_a_hostile_or_broken_event_gives_no_figures(change):
    text = line(**{k: v for k, v in {**GOOD, **change}.items() if v is not None})
    parsed = run_events.parse_event(text)
    assert parsed is None or run_events.utilization(parsed) is None
    assert isinstance(run_events.readable(text), (str, type(None)))  # the log view never raises on it


@pytest.mark.parametrize("text", ['geotrain-event {"kind": "utilization", "cpu": NaN, "rank": 0, "wall_s": 1, '
                                  '"wait_s": 0}', 'geotrain-event {"kind": "utilization", "cpu": Infinity}'])
def test_not_a_number_is_no_event(text):
    assert run_events.parse_event(text) is None


def test_the_supervisor_keeps_each_workers_last_figures_and_rereads_them_strictly(tmp_path):
    history = RunHistory(tmp_path, workers=2)
    history.worker_line("worker-0", line(**{**GOOD, "rank": 0, "cpu": 0.5}))
    history.worker_line("worker-1", line(**GOOD))
    history.worker_line("worker-1", line(**{**GOOD, "cpu": 0.25, "step": 30}))
    history.worker_line("worker-1", line(**{**GOOD, "cpu": -5}))  # ignored: the last good one stays
    kept = read_utilization(tmp_path)
    assert sorted(kept) == ["worker-0", "worker-1"]
    assert (kept["worker-0"]["cpu"], kept["worker-1"]["cpu"], kept["worker-1"]["step"]) == (0.5, 0.25, 30)
    saved = json.loads((tmp_path / UTILIZATION_FILE).read_text())
    saved["worker-0"]["cpu"] = float("inf")  # someone edits the file: that worker's row is left out
    saved["not a worker"] = dict(GOOD)
    (tmp_path / UTILIZATION_FILE).write_text(json.dumps(saved))
    assert sorted(read_utilization(tmp_path)) == ["worker-1"]
    (tmp_path / UTILIZATION_FILE).write_text("[" * 10000)
    assert read_utilization(tmp_path) == {}


def families(text: str) -> dict:
    """Families by name, from Prometheus's text parser; the strict OpenMetrics parser must read it too."""
    strict = {f.name: f.samples for f in openmetrics_families(text)}
    classic = {f.name: f for f in text_string_to_metric_families(text)}
    assert {s.name for f in strict.values() for s in f} == {s.name for f in classic.values() for s in f.samples}
    return classic


def test_openmetrics_text_reads_in_prometheus_own_parser_with_escaped_labels():
    utilization = {"worker-0": {**GOOD, "rank": 0, "wait_ratio": 0.25},
                   "worker-1": {**GOOD, "cpu": 1.25, "wait_ratio": 0.5, "gpu": 80.0, "gpu_memory_bytes": 2048}}
    rows = [{"step": 10, "loss": 5.0, "bytes_sent": 100}, {"step": 20, "loss": 4.5, "bytes_sent": 300}]
    workspace = 'odd "name"\\with\nnewline'
    text = openmetrics.render(workspace, utilization, rows)
    assert text.endswith("# EOF\n")
    got = families(text)
    cpu = {s.labels["worker"]: s.value for s in got["geotrain_worker_cpu_ratio"].samples}
    assert cpu == {"worker-0": 0.75, "worker-1": 1.25}
    assert {s.labels["workspace"] for s in got["geotrain_worker_cpu_ratio"].samples} == {workspace}
    wait = {s.labels["worker"]: s.value for s in got["geotrain_worker_network_wait_ratio"].samples}
    assert wait == {"worker-0": 0.25, "worker-1": 0.5}
    gpu = got["geotrain_worker_gpu_utilization_ratio"].samples
    assert [(s.labels["worker"], s.value) for s in gpu] == [("worker-1", 0.8)]
    assert got["geotrain_loss"].samples[0].value == 4.5
    assert [(s.labels["worker"], s.value) for s in got["geotrain_bytes_sent_total"].samples] == [("worker-0", 300)]
    assert {f.name: f.type for f in openmetrics_families(text)}["geotrain_bytes_sent"] == "counter"
    assert openmetrics.render("ws", {}, []) == "# EOF\n"


# one real run --------------------------------------------------------------------

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_local_run_shows_each_workers_figures_and_exports_them(geotrain_home):
    from core.workspaces import DeployRequest, WorkspaceService

    service = WorkspaceService()
    ws = service.deploy(service.build_spec(DeployRequest(steps=40)), {})
    deadline = time.time() + 240
    while service.status(ws.id).status not in ("COMPLETED", "FAILED") and time.time() < deadline:
        time.sleep(0.5)
    assert service.status(ws.id).status == "COMPLETED"
    figures = service.utilization(ws.id)
    assert sorted(figures) == ["worker-0", "worker-1"]
    for worker in figures.values():
        assert worker["step"] == 40 and 0 < worker["cpu"] and 0 <= worker["wait_ratio"] <= 1
        assert "gpu" not in worker and "gpu_memory_bytes" not in worker  # CPU workers report no GPU
    shown = _cli("workspaces", "show", ws.id)
    assert shown.returncode == 0, shown.stderr
    rows = [ln.split() for ln in shown.stdout.splitlines() if ln.strip().startswith("worker-") and "%" in ln]
    assert [r[0] for r in rows] == ["worker-0", "worker-1"], shown.stdout
    assert all(r[1].endswith("%") and r[2].endswith("%") for r in rows)
    exported = _cli("workspaces", "metrics", ws.id, "--openmetrics")
    assert exported.returncode == 0, exported.stderr
    got = families(exported.stdout)
    assert {s.labels["worker"] for s in got["geotrain_worker_network_wait_ratio"].samples} == {"worker-0", "worker-1"}
    assert got["geotrain_loss"].samples[0].value > 0
    assert got["geotrain_bytes_sent_total"].samples[0].value > 0
    service.delete(ws.id)
