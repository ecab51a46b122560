"""The benchmark's machinery end to end on a short budget (the numbers come from --quick in CI)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.recipes.conftest import REPO, recipe_env


@pytest.mark.slow
def test_bench_writes_the_report_core_and_readme_use(tmp_path):
    out = tmp_path / "bench.json"
    res = subprocess.run([sys.executable, "-m", "recipes.bench", "--methods", "ddp", "ultra", "--steps", "100",
                          "--json", str(out)], cwd=REPO, env=recipe_env(), capture_output=True, text=True,
                         timeout=400)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["entropy_floor"] > 0
    assert set(report["methods"]) == {"ddp", "none", "ultra"}
    for m in report["methods"].values():
        assert {"bytes_per_rank", "bytes_vs_ddp", "loss", "excess_loss", "wall_s"} <= set(m)
    ddp, ultra = report["methods"]["ddp"], report["methods"]["ultra"]
    assert ddp["bytes_vs_ddp"] == 1.0
    assert ultra["bytes_vs_ddp"] == ddp["bytes_per_rank"] / ultra["bytes_per_rank"] > 100
    assert "inner step: AdamW" in res.stdout and "excess/DDP" in res.stdout
