"""A rank that lands on a node whose checkpoint directory holds only other ranks' files says so
loudly before it starts from step 0 (issue 41, item 9): torchrun does not keep a node's ranks
across restarts (torch/distributed/run.py, notice 6: "RANK is NOT stable"). Real recipes.train."""

from __future__ import annotations

import subprocess

from tests.recipes.conftest import REPO, recipe_env


def test_a_rank_without_its_own_checkpoint_beside_others_says_it_starts_over(tmp_path, tiny_gpt):
    out = tmp_path / "run"
    def cmd(steps: int) -> list[str]:
        return ["python", "-m", "recipes.train", "--config", str(tiny_gpt), f"out_dir={out}", f"steps={steps}",
                "logging.wandb=false", "gradient_compression=none", "logging.log_every=5", "checkpoint.every=5"]

    first = subprocess.run(cmd(10), cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    steps = sorted((out / "checkpoints").glob("step_*"))
    assert steps
    for step in steps:  # the node kept rank 1's checkpoints: this rank 0 wrote its own elsewhere
        for path in step.glob("rank_0.*"):
            path.rename(path.with_name(path.name.replace("rank_0", "rank_1")))
    again = subprocess.run(cmd(12), cwd=REPO, env=recipe_env(), capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    said = [line for line in again.stderr.splitlines() if "no checkpoint of its own" in line]
    assert len(said) == 1 and "ranks 1 do" in said[0] and "starts from step 0" in said[0]
    assert "resumed from checkpoint" not in again.stdout
