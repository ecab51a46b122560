"""The benchmark's machinery end to end on a short budget (the numbers come from --quick in CI)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

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


@pytest.mark.slow
def test_text_task_runs_budgets_in_parallel_once_each_and_guards_its_baseline(tmp_path):
    """The natural-text task end to end on a short budget: DDP's reach run, `low`'s reach run and
    one run per distinct budget length, three torchruns at once."""
    out = tmp_path / "text.json"
    cmd = [sys.executable, "-m", "recipes.bench", "--task", "text", "--steps", "20", "--eval-every", "10",
           "--methods", "ddp", "low", "low", "--set", "low:diloco.inner_steps=5", "--budgets", "1.5", "1.5", "2",
           "--parallel", "3", "--json", str(out)]
    res = subprocess.run(cmd, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["task"] == "text" and report["budgets"] == [1.5, 2.0] and report["device"] == "cpu"
    labels = [line.split(":")[0] for line in res.stdout.splitlines() if line.startswith("seed 0 ")]
    assert labels.count("seed 0 low") == 1  # `low` named twice runs once
    assert sorted(line.split(":")[0] for line in res.stdout.splitlines() if line.startswith("seed 0 low@")) == \
        ["seed 0 low@1.5x", "seed 0 low@2x"]
    low = report["runs"][0]["methods"]["low"]
    assert set(low["budget_losses"]) == {"1", "1.5", "2"}
    assert low["budget_losses"]["1"] == low["loss"]  # the 1x budget is the equal-compute point
    reached = [f for f, loss in low["budget_losses"].items() if loss <= report["ddp_loss"]]
    assert report["methods"]["low"]["budget_reach"] == (min(float(f) for f in reached) if reached else None)
    assert {p["step"] for p in low["curve"]} == {10, 20, 30, 40} and report["ddp_steps"] == 20
    # DDP's curve from a CPU report is no baseline for a GPU run: refused before anything runs
    again = subprocess.run([*cmd[:cmd.index("--json")], "--ddp-from", str(out), "--device", "cuda"], cwd=REPO,
                           env=recipe_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "run DDP again here" in again.stderr and "seed 0" not in again.stdout
    # nor is one run with other settings: an older report (none recorded) or DDP at another Adam beta1
    assert report["shared"][-1] == "logging.log_every=100" and "optim.betas=[0.5,0.95]" in report["shared"]
    assert report["sets"]["low"] == ["gradient_compression=low", "diloco.inner_steps=5"]
    older = {k: v for k, v in report.items() if k not in ("shared", "sets")}
    (tmp_path / "older.json").write_text(json.dumps(older))
    again = subprocess.run([*cmd[:cmd.index("--json")], "--ddp-from", str(tmp_path / "older.json")], cwd=REPO,
                           env=recipe_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "records no settings" in again.stderr and "run DDP again here" in again.stderr
    assert "seed 0" not in again.stdout
    # nor one whose model transformers built otherwise, or from before reports recorded its version
    assert [report[k] for k in ("torch", "transformers", "datasets")] == [version(k) for k in ("torch", "transformers",
                                                                                              "datasets")]
    unbuilt = {k: v for k, v in report.items() if k != "transformers"}
    (tmp_path / "unbuilt.json").write_text(json.dumps(unbuilt))
    again = subprocess.run([*cmd[:cmd.index("--json")], "--ddp-from", str(tmp_path / "unbuilt.json")], cwd=REPO,
                           env=recipe_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "seed 0" not in again.stdout
    assert f"(transformers (not recorded) against {version('transformers')}): run DDP again here" in again.stderr
    again = subprocess.run([*cmd[:cmd.index("--json")], "--ddp-from", str(out), "--set", "all:optim.betas=[0.9,0.95]"],
                           cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "(ddp optim.betas=(unset) against [0.9,0.95])" in again.stderr
    assert "seed 0" not in again.stdout


def test_a_failed_run_names_the_workers_exception_not_the_launchers_summary():
    from recipes.bench.presets import worker_error

    stderr = ("[rank1]: Traceback (most recent call last):\n"
              "[rank1]:   File \"recipes/train.py\", line 9, in main\n"
              "[rank1]: ModuleNotFoundError: No module named 'pydantic'\n"
              "E1123 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: 1) local_rank: 1\n"
              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    assert worker_error(stderr) == "ModuleNotFoundError: No module named 'pydantic'"
    assert worker_error("SystemExit: bad --set\n") == "SystemExit: bad --set"
    launcher_noise = ("*****\nSetting OMP_NUM_THREADS environment variable for each process\n*****\n"
                      "config error: steps: expected an integer, found 'oops'\n"
                      "E1123 08:06:55.609000 api.py:1002] failed (exitcode: 2) local_rank: 1\n")
    assert worker_error(launcher_noise) == "config error: steps: expected an integer, found 'oops'"
    assert worker_error("  \nsomething odd happened\n") == "something odd happened"
    assert worker_error("") == "no output"


def test_runs_keep_the_callers_python_path_and_a_failure_says_why(tmp_path, monkeypatch):
    """Workers import what the caller's PYTHONPATH adds (packages carried to another machine): a
    sitecustomize there leaves a mark per process. A real run with a bad setting fails, and the
    error names the worker's one-line message."""
    from recipes.bench import presets

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(tmp_path)!r}, 'mark-' + str(os.getpid())).touch()\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    with pytest.raises(RuntimeError) as err:
        presets.torchrun("ddp", ["steps=oops"], tmp_path / "run")
    first = str(err.value).splitlines()[0]
    assert first.startswith("ddp failed: ") and "steps" in first
    assert len(list(tmp_path.glob("mark-*"))) == 2  # both workers (ranks start directly: no launcher)


def test_text_only_options_on_the_markov_task_are_refused_in_one_line(capsys):
    """`--merge` and friends without `--task text` would otherwise be ignored while the Markov
    bench runs for minutes: refused before anything starts."""
    from recipes.bench import presets

    with pytest.raises(SystemExit) as err:
        presets.main(["--merge", "a.json", "b.json", "--budgets", "1.2"])
    assert str(err.value) == "--merge, --budgets: only for the text task; add --task text"
    with pytest.raises(SystemExit) as err:
        presets.main(["--quick", "--set", "high:diloco.inner_steps=50"])
    assert str(err.value) == "--set: only for the text task; add --task text"
    with pytest.raises(SystemExit) as err:  # on the text task, a --set names a method of the run, or all
        presets.main(["--task", "text", "--methods", "ddp", "high", "--set", "ultra:diloco.inner_steps=50"])
    assert str(err.value) == ("--set 'ultra:diloco.inner_steps=50': write METHOD:KEY=VALUE with METHOD one of ddp, "
                              "high, or all (every method, DDP included)")
    with pytest.raises(SystemExit) as err:
        presets.main(["--quick", "--methods", "ddp", "low8"])
    assert str(err.value).startswith("--methods low8: not a Markov bench method; choose from ddp, low, ")
