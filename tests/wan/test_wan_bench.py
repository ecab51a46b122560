"""The WAN bench's quick mode across real shaped namespaces (root), and the planner against its figures.

Checks the report's shape and sanity, not speed targets: the figures themselves
are printed (the table) and reported in the README.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.planner import wan_what_if as planner

from core.domain import recipe_catalog

ROOT = Path(__file__).resolve().parents[2]
# Planner time predictions must land this close to the measured step times (the target is 25%;
# the test allows for a CI machine whose CPU other jobs share).
TOLERANCE = 0.35


@pytest.fixture(scope="session")
def quick_report(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the WAN bench needs root: network namespaces and tc")
    if shutil.which("tc") is None or shutil.which("ip") is None:
        pytest.skip("iproute2 (ip, tc) is not installed")
    out = tmp_path_factory.mktemp("wan") / "wan.json"
    # the quick bench without its 4x reach runs and without high-overlap (7 torchruns instead of 10, CI's
    # longest setup: low-overlap's bf16 exchange puts more of the planner's overlap model to the test than
    # high's 1-bit one), on 200 Mbit/s uplinks instead of 50 (DDP's 150 steps take ~15 s instead of ~50;
    # the link still bounds it: ~19% utilisation); the losses, and so the reach steps, do not depend on the
    # machine's or the link's speed; high reaches DDP's loss within 2x the steps
    proc = subprocess.run([sys.executable, "-m", "recipes.bench.wan", "--quick", "--reach-factors", "2",
                           "--mbit", "200", "--methods", "ddp", "low", "low-overlap", "high", "--json", str(out)],
                          cwd=ROOT,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_quick_bench_report_shape_and_sanity(quick_report, capsys):
    report, stdout = quick_report
    with capsys.disabled():
        print(stdout[stdout.index("WAN bench:") - 1:])
    assert report["link_mbit"] == 200.0 and report["datacenters"] == 2 and report["params"] > 0
    methods = report["methods"]
    assert {"ddp", "low", "low-overlap", "high"} <= set(methods)
    for name, m in methods.items():
        assert m["wall_s"] > 0 and m["wan_bytes"] > 0, name
        assert 0 < m["utilization"] <= 1, name
        reached = m["time_to_ddp_loss_s"]
        if m["reach_run_steps"] is None:  # reached within the shared budget, or not at all
            assert reached is None or 0 <= reached <= m["wall_s"] + 1, name
        else:  # a longer run of the method was timed to DDP's final loss
            assert m["reach_run_steps"] in [k * report["steps"] for k in report["reach_factors"]], name
            assert report["steps"] < m["reach_step"] <= m["reach_run_steps"] and reached > 0, name
        assert m["steps"] == report["steps"], name
    assert report["workers_per_dc"] == 1  # one worker per datacenter: flat DiLoCo, nothing on a LAN
    assert all(m["wan_bytes_per_dc"] > 0 and m["lan_bytes"] == 0 for m in methods.values())
    assert methods["ddp"]["time_to_ddp_loss_s"] is not None  # DDP reaches its own final loss
    assert methods["ddp"]["reach_run_steps"] is None
    # the headline preset does get to DDP's loss (how much sooner is the printed figure, not a test)
    assert methods["high"]["time_to_ddp_loss_s"] is not None
    for name, m in methods.items():  # the table says which times came from a longer run
        assert (f"* {name}: ended the" in stdout) == (m["reach_run_steps"] is not None), name
    # what crossed the uplinks: DDP > bf16 every 8 steps > 1-bit signs every 32 steps
    assert methods["ddp"]["wan_bytes"] > methods["low"]["wan_bytes"] > methods["high"]["wan_bytes"]
    assert methods["ddp"]["payload_bytes"] > methods["low"]["payload_bytes"] > methods["high"]["payload_bytes"]
    # interface counters include TCP/IP headers on top of what the collectives counted
    assert methods["ddp"]["wan_bytes"] >= methods["ddp"]["payload_bytes"]
    # the link, not the CPU, bounds DDP; DiLoCo hides most of it
    assert methods["ddp"]["utilization"] < methods["high"]["utilization"]


def predicted_step(report: dict, name: str, m: dict) -> float:
    preset = {"ddp": "none"}.get(name.split("-")[0], name.split("-")[0])
    net = planner.Network(workers=report["datacenters"], mbit_s=report["link_mbit"],
                          latency_ms=report.get("latency_ms", 0.0))
    e = planner.estimate(preset, recipe_catalog.presets()[preset], report["params"], m["compute_step_s"], net)
    return e.step_s_overlap if name.endswith("overlap") else e.step_s


def test_planner_predicts_the_measured_step_times(quick_report, capsys):
    report, _ = quick_report
    rows = []
    for name, m in report["methods"].items():
        predicted = predicted_step(report, name, m)
        rows.append((name, predicted, m["step_s"], predicted / m["step_s"] - 1))
    with capsys.disabled():
        print("\nplanner vs bench (step seconds): " +
              ", ".join(f"{n} {p:.3f}/{s:.3f} ({e:+.0%})" for n, p, s, e in rows))
    for name, predicted, measured, error in rows:
        assert abs(error) <= TOLERANCE, f"{name}: predicted {predicted:.3f}s, measured {measured:.3f}s"
