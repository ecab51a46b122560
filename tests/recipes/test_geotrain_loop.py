"""geotrain_loop, the API for a training loop geotrain did not write: the same bytes as the catalog
recipe for the same model, preset and steps; a user's own `recipes`/`core`/`tui` packages first on
sys.path change nothing; config keys checked as the catalog checks them. Real ranks on gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from recipes.bench.local_group import run_ranks
from tests.recipes.conftest import REPO, TINY_GPT

EXAMPLE = REPO / "tests" / "examples" / "train_plain.py"
HF_EXAMPLE = REPO / "tests" / "examples" / "train_hf.py"
STEPS = 30  # two whole phases of medium's H=12 and a partial one that finish() syncs


def results(stdout: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines() if line.startswith("result ")]


def example(tmp_path: Path, *args: str, env: dict | None = None, cwd: Path | None = None,
            script: Path = EXAMPLE) -> list[dict]:
    done = run_ranks([], 2, {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd or tmp_path, timeout=600,
                     command=[sys.executable, str(script), *args])
    assert done.returncode == 0, done.stderr[-2000:]
    return results(done.stdout)


@pytest.mark.slow
def test_the_api_sends_what_the_catalog_recipe_sends(tmp_path):
    """The example loop at `medium` on 2 workers: the same bytes per rank as `recipes.train` with the catalog's
    gpt-neo/tiny (same parameter count) at `medium` for the same steps, and ranks that end equal; the same loop
    as plain DDP sends hundreds of times more. Bytes and losses printed for both."""
    catalog = run_ranks(["--config", str(TINY_GPT), f"steps={STEPS}", "gradient_compression=medium",
                         "logging.wandb=false", "checkpoint.every=0", f"out_dir={tmp_path / 'catalog'}"], 2,
                        {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}, tmp_path, timeout=600)
    assert catalog.returncode == 0, catalog.stderr[-2000:]
    catalog_bytes = json.loads((tmp_path / "catalog" / "result.json").read_text())["bytes_sent"]
    api = example(tmp_path, "--mode", "api", "--preset", "medium", "--steps", str(STEPS))
    ddp = example(tmp_path, "--mode", "ddp", "--steps", str(STEPS))
    for name, run in (("ddp", ddp), ("medium", api)):
        print(f"{name}: bytes sent per rank {run[0]['bytes_sent']:,}, held-out loss {run[0]['eval_loss']}")
    assert [r["bytes_sent"] for r in api] == [catalog_bytes, catalog_bytes] and catalog_bytes > 0
    assert api[0]["eval_loss"] == api[1]["eval_loss"]  # every rank holds the same weights after finish()
    assert ddp[0]["bytes_sent"] > 250 * catalog_bytes


@pytest.mark.slow
def test_a_hugging_face_trainer_script_with_one_line(tmp_path):
    """tests/examples/train_hf.py: the Trainer's own DDP, then the same script with
    geotrain_loop.huggingface("medium"): the catalog's bytes for this model, preset and steps (51,240 per rank
    over 30 steps: test_the_api_sends_what_the_catalog_recipe_sends), the Trainer's DDP wrapper kept from
    syncing (after step 1 each rank holds its own weights; under DDP they are equal), ranks equal at the end."""
    ddp = example(tmp_path, "--steps", str(STEPS), script=HF_EXAMPLE)
    api = example(tmp_path, "--preset", "medium", "--steps", str(STEPS), script=HF_EXAMPLE)
    for name, run in (("Trainer DDP", ddp), ("Trainer + geotrain_loop medium", api)):
        print(f"{name}: bytes sent per rank {run[0]['bytes_sent']:,}, held-out loss {run[0]['eval_loss']}")
    assert ddp[0]["first_step"] == ddp[1]["first_step"] and api[0]["first_step"] != api[1]["first_step"]
    assert [r["bytes_sent"] for r in api] == [51240, 51240]
    assert api[0]["eval_loss"] == api[1]["eval_loss"]
    assert ddp[0]["bytes_sent"] > 250 * api[0]["bytes_sent"]


USER_PACKAGES = {
    "recipes/__init__.py": "MARK = 'the user'\n",
    "recipes/distributed.py": "raise RuntimeError('the user recipes.distributed was imported')\n",
    "recipes/algorithms/__init__.py": "raise RuntimeError('the user recipes.algorithms was imported')\n",
    "core/__init__.py": "MARK = 'the user'\n",
    "tui/__init__.py": "MARK = 'the user'\n",
}

IN_USER_PROJECT = textwrap.dedent("""
    import sys, torch
    import recipes, core, tui
    import geotrain_loop
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loop = geotrain_loop.Loop(model, opt, "high", steps=5)
    for _ in range(5):
        model(torch.randn(4, 8)).square().mean().backward()
        loop.step()
    loop.finish()
    assert (recipes.MARK, core.MARK, tui.MARK) == ("the user",) * 3
    assert not [m for m in sys.modules if m.startswith("recipes.")], "geotrain code imported the user's recipes"
    print("ok", loop.outer_step)
""")


@pytest.mark.slow
def test_a_user_project_with_its_own_recipes_core_and_tui(tmp_path):
    """The user's packages come first on sys.path (their cwd and PYTHONPATH); geotrain_loop (installed) still
    runs geotrain's algorithms, on one worker and on two, and the user's `recipes` stays theirs."""
    project = tmp_path / "project"
    for rel, text in USER_PACKAGES.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    alone = subprocess.run([sys.executable, "-c", IN_USER_PROJECT], cwd=project, capture_output=True, text=True,
                           env={**env, "PYTHONPATH": str(project)}, timeout=300)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert alone.stdout.split()[-2:] == ["ok", "1"]  # high's H=40: the 5 steps end in one partial sync
    two = example(tmp_path, "--mode", "api", "--preset", "medium", "--steps", "12", cwd=project,
                  env={"PYTHONPATH": str(project)})
    assert len(two) == 2 and two[0]["bytes_sent"] > 0


def test_config_keys_are_the_catalogs(monkeypatch):
    """The catalog's keys (dotted or nested) set the loop; a catalog-only key, a bad value or an unknown preset
    is one line saying what to change."""
    import geotrain_loop

    for var in ("RANK", "WORLD_SIZE", "GEOTRAIN_GROUP_STORE", "GEOTRAIN_OUT_DIR"):
        monkeypatch.delenv(var, raising=False)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), betas=(0.5, 0.95))
    loop = geotrain_loop.Loop(model, opt, "medium", config={"diloco.inner_steps": 3, "diloco": {"bits": 8}})
    assert (loop.comp.inner_steps, loop.comp.bits, loop.algo.name) == (3, 8, "diloco")
    # the preset's outer lr follows the inner Adam's beta1, read from the optimizer (presets.yaml outer_lr_by_beta1)
    assert geotrain_loop.Loop(model, opt, "low").comp.outer_lr == 0.7
    assert geotrain_loop.Loop(model, opt, "ultra").comp.fragments == 2  # Streaming DiLoCo
    refusals = [({"data.source": "markov"}, "describes a catalog run"), ({"optim.lr": 1.0}, "your optimizer's own"),
                ({"diloco.bits": 7}, "config diloco.bits")]
    for keys, said in refusals:
        with pytest.raises(geotrain_loop.LoopConfigError, match=said) as caught:
            geotrain_loop.Loop(model, opt, "medium", config=keys)
        assert "\n" not in str(caught.value)
    with pytest.raises(geotrain_loop.LoopConfigError, match="gradient_compression"):
        geotrain_loop.Loop(model, opt, "extreme")


HIERARCHICAL = textwrap.dedent("""
    import torch, geotrain_loop
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loop = geotrain_loop.Loop(model, optimizer, "medium", steps=24, config={"datacenters": 2})
    for step in range(24):
        x = torch.randn(64, 32)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        loss.backward()
        loop.step(loss)
    loop.finish()
    weights = sum(float(p.detach().double().sum()) for p in model.parameters())
    print("result " + __import__("json").dumps({"wan": loop.bytes_sent, "lan": loop.lan_bytes, "weights": weights}))
""")


@pytest.mark.slow
def test_hierarchical_datacenters_through_the_api(tmp_path):
    """config datacenters=2 on 4 ranks: gradients all-reduced inside each datacenter every step (LAN bytes),
    the preset's compressed exchange between datacenters only (WAN bytes, far fewer), every rank equal."""
    (tmp_path / "train.py").write_text(HIERARCHICAL)
    done = run_ranks([], 4, {**os.environ, "OMP_NUM_THREADS": "1"}, tmp_path, timeout=600,
                     command=[sys.executable, "train.py"])
    assert done.returncode == 0, done.stderr[-2000:]
    ranks = results(done.stdout)
    assert len(ranks) == 4 and len({round(r["weights"], 6) for r in ranks}) == 1
    assert all(0 < r["wan"] < r["lan"] / 100 for r in ranks)


@pytest.mark.slow
def test_an_accelerate_loop_as_the_readme_says(tmp_path):
    """tests/examples/train_accelerate.py on 2 workers: accelerate uses the group geotrain_loop joined (2
    processes, its data sharded: 32 steps each of 64 batches), the medium sync is the only traffic, ranks end equal."""
    done = run_ranks([], 2, {**os.environ, "OMP_NUM_THREADS": "1"}, tmp_path, timeout=600,
                     command=[sys.executable, str(REPO / "tests" / "examples" / "train_accelerate.py")])
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("result ranks")]
    assert [(w[2], w[4]) for w in lines] == [("2", "32"), ("2", "32")]
    assert lines[0][8] == lines[1][8] != "0" and lines[0][10] == lines[1][10]  # bytes sent, final weights
