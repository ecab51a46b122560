"""Real 2-process torchrun runs on gloo: every algorithm learns, bytes add up, a kill -9 resumes."""

from __future__ import annotations

import json
import math
import queue
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from recipes.algorithms.exchange import QuantizedExchange
from recipes.algorithms.streaming import fragment_bounds
from recipes.compression import BlockCodec
from recipes.distributed import Wire
from recipes.models import build_model
from tests.recipes.conftest import REPO, read_metrics, recipe_env, run_torchrun, torchrun_cmd

SHORT = ["steps=120", "logging.log_every=20", "checkpoint.every=0", "logging.wandb=false",
         "data.batch_size=8", "optim.warmup_steps=10"]
PARAMS = 132_480  # tiny gpt-neo


@pytest.mark.slow
@pytest.mark.parametrize("preset,extra", [
    ("none", []),
    ("low", ["diloco.inner_steps=20"]),
    ("high", ["diloco.inner_steps=20"]),
    ("ultra", ["diloco.inner_steps=20", "diloco.block=128", "diloco.rotate=false"]),  # 2 fragments, plain 1-bit per 128
    ("high", ["diloco.inner_steps=20", "diloco.bits=4"]),  # rotated fp4 with high's scale per 1024 values
    ("high", ["diloco.inner_steps=20", "diloco.density=0.5"]),  # half the values each sync, the same on both ranks
    ("ultra", ["diloco.inner_steps=20", "algorithm=demo", "diloco.bits=8", "diloco.block=128"]),
    ("high", ["diloco.inner_steps=20", "diloco.overlap=true"]),
    ("high", ["diloco.inner_steps=20", "diloco.overlap=true", "diloco.bits=4"]),
    ("none", ["optim.name=muon"]),  # Muon's inner steps under DDP's averaged gradients
    ("high", ["diloco.inner_steps=20", "optim.name=muon"]),
])
def test_each_algorithm_learns_on_two_workers(preset, extra, tmp_path, tiny_gpt):
    out = tmp_path / "run"
    res = run_torchrun(tiny_gpt, [f"out_dir={out}", f"gradient_compression={preset}", *SHORT, *extra])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    metrics = [m for m in read_metrics(out) if "eval_loss" not in m]
    result = json.loads((out / "result.json").read_text())
    assert metrics[-1]["loss"] < metrics[0]["loss"] - 1.0
    assert result["eval_loss"] < math.log(64) - 0.5, "the model learned the chain, not just its alphabet"
    sent = result["bytes_sent"]
    if preset == "none":  # fp32 ring all-reduce of every gradient, every step: 2(N-1)/N * 4P = 4P for N=2
        assert sent == 120 * 4 * PARAMS
    elif preset == "low":  # bf16 all-reduce every 20 steps
        assert sent == 6 * 2 * PARAMS
    elif "diloco.bits=4" in extra:  # packed fp4 + one fp32 scale per 1024 values (high's block), all-gathered:
        assert sent == 6 * (math.ceil(PARAMS / 2) + 4 * math.ceil(PARAMS / 1024))  # (N-1) * payload
    elif preset == "ultra" and "algorithm=demo" not in extra:  # sign bits + one fp32 scale per 128 values, per
        model = build_model("gpt-neo", "tiny")[0]  # fragment: [0] syncs at 20, 40 ... 120 (the last step), [1] at
        (lo0, hi0), (lo1, hi1) = fragment_bounds([p.numel() for p in model.parameters()], 2)  # 10 ... 110 and 120
        assert hi0 == lo1 and hi1 == PARAMS
        assert sent == 6 * BlockCodec(1, 128).payload_bytes(hi0 - lo0) + 7 * BlockCodec(1, 128).payload_bytes(hi1 - lo1)
    elif "diloco.density=0.5" in extra:  # each sync: 65 of the 130 blocks' sign bits + scales, no indices
        subsets = QuantizedExchange(PARAMS, 1, 1024, Wire(1), density=0.5, seed=0)  # the config's seed
        sizes = [subsets.positions(s).numel() for s in range(6)]
        assert set(sizes) <= {65 * 1024, 64 * 1024 + PARAMS % 1024}  # the last block holds 384 values
        assert sent == sum(BlockCodec(1, 1024).payload_bytes(n) for n in sizes)
    elif "algorithm=demo" not in extra:  # high: rotated sign bits + one fp32 scale per 1024 values (a
        assert sent == 6 * (math.ceil(PARAMS / 8) + 4 * math.ceil(PARAMS / 1024))  # rotation costs no bytes)
    else:  # DeMo top-4 of 64 DCT coefficients: 6-bit indices + fp8 values + scales
        sent_values = math.ceil(PARAMS / 64) * 4
        assert sent == 6 * (math.ceil(sent_values * 6 / 8) + sent_values + 4 * math.ceil(sent_values / 128))
    assert result["outer_step"] == (120 if preset == "none" else 6)


def _kill_rank_when(proc: subprocess.Popen, marker: str, rank: int, timeout: float) -> list[str]:
    """Read torchrun's output; when `marker` shows up, SIGKILL the worker with that rank.

    The output is read on a thread so that a silent hang still ends at the deadline.
    """
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] and None,
                     daemon=True).start()
    seen, killed, deadline = [], False, time.time() + timeout
    while proc.poll() is None or not lines.empty():
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if time.time() > deadline:
                proc.kill()
                break
            continue
        seen.append(line)
        if not killed and marker in line:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if child.environ().get("RANK") == str(rank) and "recipes.train" in " ".join(child.cmdline()):
                        child.kill()
                        killed = True
                except psutil.Error:
                    continue
    proc.wait(timeout=60)
    assert killed, "never saw " + marker
    assert time.time() <= deadline, "the run did not finish in time:\n" + "".join(seen[-40:])
    return seen


@pytest.mark.slow
def test_kill_9_mid_run_resumes_from_checkpoint_and_matches_uninterrupted(tmp_path, tiny_gpt):
    common = ["steps=240", "checkpoint.every=60", "logging.log_every=10", "logging.wandb=false",
              "data.batch_size=8", "gradient_compression=medium"]
    ref = tmp_path / "ref"
    res = run_torchrun(tiny_gpt, [f"out_dir={ref}", *common])
    assert res.returncode == 0, res.stderr[-2000:]
    out = tmp_path / "killed"
    proc = subprocess.Popen(torchrun_cmd(tiny_gpt, [f"out_dir={out}", *common], max_restarts=2), cwd=REPO,
                            env=recipe_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = _kill_rank_when(proc, "[rank 1] step 150/240", rank=1, timeout=300)
    text = "".join(lines)
    assert proc.returncode == 0, text[-3000:]
    assert "resumed from checkpoint at step 120" in text
    assert "restart 1" in text
    expected = json.loads((ref / "result.json").read_text())
    got = json.loads((out / "result.json").read_text())
    # stated tolerance: the resumed run ends within 1% of the uninterrupted run's held-out loss
    # (it replays the same data, RNG and optimizer state, so in practice it matches exactly)
    assert got["eval_loss"] == pytest.approx(expected["eval_loss"], rel=0.01)
    assert got["bytes_sent"] >= expected["bytes_sent"]


def test_single_process_run_needs_no_torchrun_and_a_rerun_after_the_end_changes_nothing(tmp_path, tiny_gpt):
    out = tmp_path / "solo"
    cmd = ["python", "-m", "recipes.train", "--config", str(tiny_gpt), f"out_dir={out}", "steps=25",
           "logging.wandb=false", "gradient_compression=high", "diloco.inner_steps=10", "logging.log_every=5"]
    res = subprocess.run(cmd, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "[rank 0] done" in res.stdout
    assert "preset high (diloco, H=10, 1 bits, outer lr 0.9)" in res.stdout  # the preset's at Adam beta1 0.9
    first = json.loads((out / "result.json").read_text())
    assert first["bytes_sent"] == 0  # nothing crosses a wire with one process
    assert first["outer_step"] == 3  # 2 full phases + the final partial one (steps 21-25)
    again = subprocess.run(cmd, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "resumed from checkpoint at step 25" in again.stdout
    second = json.loads((out / "result.json").read_text())
    assert second["outer_step"] == 3 and second["eval_loss"] == first["eval_loss"]


def test_a_finished_run_resumed_with_more_steps_ends_where_a_run_planned_that_long_does(tmp_path, tiny_gpt):
    """20 steps at H=10 end on a whole phase, whose sync withholds the momentum look-ahead; resumed with
    30 steps, the run takes that look-ahead first and ends where a 30-step run does (same schedule)."""
    def run(out: Path, steps: int) -> subprocess.CompletedProcess:
        cmd = ["python", "-m", "recipes.train", "--config", str(tiny_gpt), f"out_dir={out}", f"steps={steps}",
               "optim.schedule_steps=30", "logging.wandb=false", "gradient_compression=high",
               "diloco.inner_steps=10", "logging.log_every=10"]
        res = subprocess.run(cmd, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        return res

    run(tmp_path / "planned", 30)
    run(tmp_path / "extended", 20)
    ended = json.loads((tmp_path / "extended" / "result.json").read_text())
    assert ended["outer_step"] == 2
    assert "resumed from checkpoint at step 20" in run(tmp_path / "extended", 30).stdout
    planned = json.loads((tmp_path / "planned" / "result.json").read_text())
    extended = json.loads((tmp_path / "extended" / "result.json").read_text())
    assert extended["outer_step"] == planned["outer_step"] == 3
    # the same to float rounding (the look-ahead is added in two parts, not one)
    assert extended["eval_loss"] == pytest.approx(planned["eval_loss"], rel=1e-6)
    assert extended["eval_loss"] != ended["eval_loss"]


def test_resume_false_beside_an_earlier_runs_checkpoints_is_refused_and_leaves_them(tmp_path, tiny_gpt):
    """checkpoint.resume=false in a folder that holds checkpoints: one line saying what to do (the workers exit 2),
    nothing changed (the ranks' agreement on a common step used to resume the newest one anyway, and
    a fresh run there would prune its own checkpoints for the older run's higher steps)."""
    common = ["logging.wandb=false", "gradient_compression=high", "diloco.inner_steps=10", "logging.log_every=10",
              "checkpoint.every=10"]
    out = tmp_path / "again"
    # in an empty folder resume=false simply trains, past its own checkpoints
    first = run_torchrun(tiny_gpt, [f"out_dir={out}", "steps=20", "checkpoint.resume=false", *common])
    assert first.returncode == 0, first.stderr[-2000:]
    assert any((out / "checkpoints").iterdir())
    before = {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    # torchrun restarts a worker that exits 2: each restart of this launch refuses again
    again = subprocess.run(torchrun_cmd(tiny_gpt, [f"out_dir={out}", "steps=30", "checkpoint.resume=false", *common],
                                        max_restarts=1), cwd=REPO, env=recipe_env(), capture_output=True, text=True,
                           timeout=240)
    assert again.returncode != 0
    assert "restart 1" not in again.stdout and again.stderr.count("holds checkpoints of an earlier run") == 4
    assert "resumed from checkpoint" not in again.stdout + again.stderr
    said = {line.split("error: ", 1)[1] for line in again.stderr.splitlines() if "error: " in line}
    assert said == {f"{out / 'checkpoints'} holds checkpoints of an earlier run (up to step 20) and checkpoint.resume is false: "
                    "move them aside or choose a new out_dir to start over, or set checkpoint.resume=true to go "
                    "on from them"}
    after = {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k.parts[0] == "checkpoints"} == \
        {k: v for k, v in before.items() if k.parts[0] == "checkpoints"}
    assert json.loads((out / "result.json").read_text())["step"] == 20


def test_bad_config_exits_2_with_the_problem(tmp_path, tiny_gpt):
    res = subprocess.run(["python", "-m", "recipes.train", "--config", str(tiny_gpt), "optim.lr=abc"],
                         cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "optim.lr" in res.stderr


def _second_run_refused(out: Path, first: list[str], second: list[str]):
    """Runs `first`, then `second` in the same out_dir: the second must be refused in one line, exit 2,
    writing nothing. Returns (the first run, the second, its error line)."""
    done = subprocess.run(first, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    before = sorted(p.name for p in out.rglob("*"))
    res = subprocess.run(second, cwd=REPO, env=recipe_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    [line] = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert sorted(p.name for p in out.rglob("*")) == before  # nothing written
    return done, res, line


def test_a_checkpoint_resumes_only_under_the_optimizer_that_wrote_it(tmp_path, tiny_gpt):
    out = tmp_path / "muon"
    cmd = ["python", "-m", "recipes.train", "--config", str(tiny_gpt), f"out_dir={out}", "logging.wandb=false",
           "gradient_compression=none", "optim.name=muon", "logging.log_every=5"]
    switched = [c.replace("optim.name=muon", "optim.name=adamw") for c in cmd]
    _, _, line = _second_run_refused(out, [*cmd, "steps=10"], [*switched, "steps=20"])
    assert "was trained with optim.name=muon: set optim.name=muon to resume it" in line
    resumed = subprocess.run([*cmd, "steps=20"], cwd=REPO, env=recipe_env(), capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 0 and "resumed from checkpoint at step 10" in resumed.stdout
    assert json.loads((out / "result.json").read_text())["step"] == 20


def test_a_checkpoint_of_fragments_resumes_only_in_fragments(tmp_path, tiny_gpt):
    # ultra syncs in 2 fragments; with overlap its fragments give way and the model syncs whole: the two
    # states do not load into each other, so the switch is refused in one line saying which setting to use
    out = tmp_path / "fragments"
    cmd = ["python", "-m", "recipes.train", "--config", str(tiny_gpt), f"out_dir={out}", "logging.wandb=false",
           "gradient_compression=ultra", "diloco.inner_steps=4", "logging.log_every=4"]
    _, _, line = _second_run_refused(out, [*cmd, "steps=8"], [*cmd, "steps=12", "diloco.overlap=true"])
    assert "at step 8" in line and "was trained in 2 fragments (set diloco.fragments=2 and diloco.overlap=false" in line
    out2 = tmp_path / "whole"
    whole = [c.replace(str(out), str(out2)) for c in cmd]
    _, _, line = _second_run_refused(out2, [*whole, "steps=8", "diloco.fragments=1"], [*whole, "steps=12"])
    assert "was trained with the model synced whole (set diloco.fragments=1 to resume it)" in line


def test_a_checkpoint_resumes_only_under_the_adam_betas_that_wrote_it(tmp_path, tiny_gpt):
    # the optimizer's saved state keeps its betas, and the preset's outer lr follows beta1: refused
    out = tmp_path / "betas"
    cmd = ["python", "-m", "recipes.train", "--config", str(tiny_gpt), f"out_dir={out}", "logging.wandb=false",
           "gradient_compression=low", "diloco.inner_steps=4", "logging.log_every=4"]
    first, res, line = _second_run_refused(out, [*cmd, "steps=8"], [*cmd, "steps=12", "optim.betas=[0.5,0.95]"])
    assert "preset low (diloco, H=4, 16 bits, outer lr 0.5)" in first.stdout
    assert "preset low (diloco, H=4, 16 bits, outer lr 0.7)" in res.stdout  # what a new run would take
    assert "at step 8" in line and "was trained with optim.betas=[0.9,0.95]: set optim.betas=[0.9,0.95] to resume" in line
