"""`geotrain clusters check local` (issue 43): a burn-in of each device (matmul throughput against the
GPU's datasheet figure, a memory test where a GPU is), the GPUs' ECC counters and Xids, and an
all-reduce of the presets' payload size timed as bus bandwidth; kept in the state database.

The ranks are real (recipes.cluster_check with torch, gloo on this CPU). nvidia-smi, rocm-smi and the
kernel's Xid lines are parsed from outputs written from their documentation (fixtures/cluster_check,
SOURCE.md), and, for the whole command, from stand-in `nvidia-smi` and `dmesg` scripts that print
them (no GPU can run here)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.domain.check_results import PREFIX, judge, parse_rank_line
from core.domain.gpu_health import datasheet_flops, gpu_problems, parse_nvidia_health, parse_rocm_health, parse_xids

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "cluster_check"
RANK = {"rank": 0, "device": "NVIDIA H100 80GB HBM3", "matmul": {"flops": 7.1e14}, "memory": {"tested_bytes": 8 << 30, "errors": 0},
        "all_reduce": {"bytes": 16 << 20, "seconds": 0.004, "busbw": 4.2e9, "world": 2, "backend": "nccl"}}


def test_nvidia_smi_ecc_and_temperatures_are_read():
    gpus = parse_nvidia_health((FIXTURES / "nvidia_health_8gpu.csv").read_text())
    assert len(gpus) == 8 and gpus[5] == {"index": 5, "name": "NVIDIA H100 80GB HBM3", "temperature_c": 41,
                                          "ecc_corrected": 3, "ecc_uncorrected": 2}
    geforce = parse_nvidia_health((FIXTURES / "nvidia_health_geforce.csv").read_text())
    assert geforce[0]["ecc_uncorrected"] is None and geforce[0]["temperature_c"] == 41
    assert gpu_problems(gpus, []) == ["GPU 5 has 2 uncorrected ECC errors"]
    assert parse_nvidia_health("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") == []


def test_xids_from_the_kernel_log_hardware_ones_named():
    xids = parse_xids((FIXTURES / "dmesg_xid.txt").read_text())
    assert [(x["pci"], x["xid"], x["hardware"]) for x in xids] == [("PCI:0000:3b:00", 13, False),
                                                                     ("PCI:0000:b7:00", 79, True)]
    assert gpu_problems([], xids) == ["Xid 79 on PCI:0000:b7:00: pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]


def test_rocm_smi_temperatures_are_read():
    gpus = parse_rocm_health((FIXTURES / "rocm_health.json").read_text())
    assert [(g["index"], g["temperature_c"], g["ecc_uncorrected"]) for g in gpus] == [(0, 35, None), (1, 37, None)]
    assert parse_rocm_health("not json {") == []


def test_the_verdict_names_a_slow_device_bad_memory_and_a_missing_rank():
    assert datasheet_flops("NVIDIA H100 PCIe") == 756e12 and datasheet_flops("cpu") is None
    good = parse_rank_line(PREFIX + json.dumps(RANK))
    slow = parse_rank_line(PREFIX + json.dumps({**RANK, "rank": 1, "matmul": {"flops": 2.0e14},
                                                "memory": {"tested_bytes": 1 << 30, "errors": 7}}))
    verdict = judge("local", "local", [good, slow], [], [], ranks_started=3, at=0)
    assert not verdict["ok"] and verdict["nodes"][0]["why"] == [
        "rank 1's matmul at 200 TFLOP/s is below 40% of the NVIDIA H100 80GB HBM3's datasheet 989",
        "rank 1's memory test read back 7 wrong bytes", "1 of 3 ranks gave no result"]
    assert verdict["links"][0]["busbw"] == 4.2e9
    assert judge("local", "local", [good], [], [], ranks_started=1)["ok"]


@pytest.mark.parametrize("line", [
    PREFIX + json.dumps({**RANK, "matmul": {"flops": float("nan")}}).replace("NaN", "NaN"),
    PREFIX + json.dumps({**RANK, "device": ["x"]}), PREFIX + json.dumps({**RANK, "all_reduce": {"seconds": "fast"}}),
    PREFIX + "[" * 5000, PREFIX + "[]", PREFIX + json.dumps({**RANK, "rank": True}), "geotrain-check", "x" * 9000,
    PREFIX + json.dumps({**RANK, "memory": {"tested_bytes": 1, "errors": -1}}),
])
def test_a_ranks_broken_or_hostile_line_is_no_result(line):
    assert parse_rank_line(line) is None


def _stand_in_tools(tmp_path: Path) -> Path:
    """`nvidia-smi` and `dmesg` stand-ins printing the fixtures (a GPU machine cannot run here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, fixture in (("nvidia-smi", "nvidia_health_8gpu.csv"), ("dmesg", "dmesg_xid.txt")):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\ncat {FIXTURES / fixture}\n")
        script.chmod(0o755)
    return bin_dir


def cli(home: Path, *args, path: str | None = None):
    env = dict(os.environ, GEOTRAIN_HOME=str(home), **({"PATH": path} if path else {}))
    return subprocess.run([sys.executable, "-m", "core.cli", "clusters", "check", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_check_local_runs_real_ranks_and_keeps_the_result(geotrain_home, tmp_path):
    done = cli(geotrain_home, "local", "--seconds", "0.3", "--size", "125m", "--preset", "medium")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cluster local, checked ") and lines[0].endswith("all good")
    assert [ln.split()[:3] for ln in lines[2:4]] == [["local", "0", "cpu"], ["local", "1", "cpu"]]
    assert lines[5].startswith("local: 2 ranks (gloo)")
    kept = cli(geotrain_home, "local", "--last", "--json")
    result = json.loads(kept.stdout)
    assert result["ok"] and [d["rank"] for d in result["nodes"][0]["devices"]] == [0, 1]
    link = result["links"][0]
    assert link["bytes"] >= 15_000_000 and link["busbw"] > 0  # gpt-neo 125m under medium: ~16 MB per sync
    with sqlite3.connect(geotrain_home / "state.sqlite3") as db:
        assert json.loads(db.execute("SELECT value FROM settings WHERE key='cluster_check/local'").fetchone()[0]) == result


def test_gpu_problems_fail_the_check_and_are_named(geotrain_home, tmp_path):
    bin_dir = _stand_in_tools(tmp_path)
    done = cli(geotrain_home, "local", "--seconds", "0.2", "--size", "125m",
               path=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert done.returncode == 1, done.stderr
    assert "PROBLEMS" in done.stdout.splitlines()[0]
    assert "local: GPU 5 has 2 uncorrected ECC errors" in done.stdout
    assert "local: Xid 79 on PCI:0000:b7:00" in done.stdout
    assert "GPU 5 NVIDIA H100 80GB HBM3: ECC 3 corrected, 2 uncorrected, 41 C" in done.stdout


def test_a_cluster_not_yet_checked_or_not_local_is_one_line(geotrain_home):
    missing = cli(geotrain_home, "local", "--last")
    assert missing.returncode != 0 and "has not been checked" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
