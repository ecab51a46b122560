"""Checkpoints that outlive a node: manifest written last, truncated or half-written ones
skipped with a warning, and the HF Hub as the copy of record — exercised against
HubStandIn, a stand-in for the Hugging Face Hub (unreachable here), through the real
`huggingface_hub` client over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from recipes.checkpoint_store import CheckpointStore, rank_files
from tests.faults.hub_stand_in import HubStandIn
from tests.recipes.conftest import REPO, TINY_GPT, recipe_env

TOKEN = "hf_standin_secret_0123456789"


def _state(step: int) -> dict:
    return {"step": step, "model": {"w": torch.full((64,), float(step))}}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    stand_in = HubStandIn()
    monkeypatch.setenv("HF_ENDPOINT", stand_in.start())
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("GEOTRAIN_CHECKPOINT_HF_REPO", "team/run-ckpts")
    monkeypatch.delenv("GEOTRAIN_CHECKPOINT_DIR", raising=False)
    yield stand_in
    stand_in.stop()


def test_half_written_and_truncated_checkpoints_are_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GEOTRAIN_CHECKPOINT_HF_REPO", raising=False)
    monkeypatch.setenv("GEOTRAIN_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    store = CheckpointStore(tmp_path / "out", rank=1, keep=5)
    for step in (8, 16, 24):
        store.save(step, _state(step))
    assert store.newest_complete() == 24
    data, manifest = rank_files(tmp_path / "ckpt", 24, 1)
    data.write_bytes(data.read_bytes()[:100])  # cut off, as a copy interrupted mid-way
    rank_files(tmp_path / "ckpt", 16, 1)[1].unlink()  # .pt written, manifest never was
    assert store.newest_complete() == 8
    err = capsys.readouterr().err
    assert f"checkpoint {data} is truncated or corrupt" in err and "skipped" in err
    assert "has no manifest (half-written): skipped" in err
    assert store.load(8)["model"]["w"][0] == 8.0


def test_checkpoints_mirror_to_the_hub_and_a_new_node_resumes_from_it(tmp_path, hub, capsys):
    first = CheckpointStore(tmp_path / "node-a", rank=0, keep=1)
    for step in (8, 16):
        first.save(step, _state(step))
        first.wait()
    assert sorted(hub.repos["team/run-ckpts"]) == [
        f"checkpoints/step_{s:08d}/rank_0.{ext}" for s in (8, 16) for ext in ("json", "pt")]
    order = [paths[0] for _, paths in hub.commits]
    assert order.index("checkpoints/step_00000016/rank_0.pt") < order.index("checkpoints/step_00000016/rank_0.json")
    assert all(auth == f"Bearer {TOKEN}" for method, _, auth in hub.requests if method == "POST")
    assert not (tmp_path / "node-a" / "checkpoints" / "step_00000008").exists()  # pruned locally, kept on the hub

    second = CheckpointStore(tmp_path / "node-b", rank=0)  # a fresh node: empty disk
    assert second.newest_complete() == 16
    assert torch.equal(second.load(16)["model"]["w"], _state(16)["model"]["w"])

    # A newer checkpoint on the hub whose file does not match its manifest is not loaded.
    blob = hub.repos["team/run-ckpts"]["checkpoints/step_00000016/rank_0.pt"]
    manifest = json.loads(hub.repos["team/run-ckpts"]["checkpoints/step_00000016/rank_0.json"])
    hub.repos["team/run-ckpts"]["checkpoints/step_00000024/rank_0.pt"] = blob[: len(blob) // 2]
    hub.repos["team/run-ckpts"]["checkpoints/step_00000024/rank_0.json"] = json.dumps(
        {**manifest, "step": 24, "file": "rank_0.pt"}).encode()
    capsys.readouterr()
    third = CheckpointStore(tmp_path / "node-c", rank=0)
    assert third.newest_complete() == 16
    assert "step_00000024/rank_0.pt is truncated or corrupt" in capsys.readouterr().err


@pytest.mark.parametrize("names_the_repo", ["checkpoint.hf_repo", "the recovery policy's mirror"])
def test_resume_false_beside_an_earlier_runs_checkpoints_on_the_hub_is_refused(tmp_path, hub, names_the_repo):
    """checkpoint.resume=false in a fresh out_dir whose HF Hub repo holds an earlier run's checkpoints
    (rank 0's files uploaded by checkpoint.hf_repo, or every rank's with manifests by the mirror): one
    line saying what to do, exit 2, nothing uploaded; a new out_dir with an empty repo simply trains."""
    by_key = names_the_repo == "checkpoint.hf_repo"
    env = recipe_env(HF_HUB_OFFLINE="0", HF_TOKEN=TOKEN)
    if by_key:
        env.pop("GEOTRAIN_CHECKPOINT_HF_REPO")

    def run(out: str, *extra: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "recipes.train", "--config", str(TINY_GPT), f"out_dir={tmp_path / out}",
               "steps=4", "checkpoint.every=2", "logging.wandb=false", "gradient_compression=low",
               "logging.log_every=2", "checkpoint.resume=false", *extra]
        return subprocess.run([*cmd, "checkpoint.hf_repo=team/run-ckpts"] if by_key else cmd, cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)

    first = run("a")  # resume=false beside an empty (not yet created) repo trains and uploads
    assert first.returncode == 0, first.stderr[-2000:]
    held = dict(hub.repos["team/run-ckpts"])
    assert "checkpoints/step_00000004/rank_0.pt" in held
    commits = len(hub.commits)
    again = run("b")
    assert again.returncode == 2, again.stdout[-2000:] + again.stderr[-2000:]
    said = {line.split("error: ", 1)[1] for line in again.stderr.splitlines() if "error: " in line}
    setting = "checkpoint.hf_repo" if by_key else "recovery.hf_repo"  # what named the repo (the mirror's: the spec's)
    assert said == {f"the HF Hub repo team/run-ckpts ({setting}) holds checkpoints of an earlier run (up to step 4) "
                    f"and checkpoint.resume is false: name a new repo in {setting} (or delete the repo's checkpoints/) "
                    "to start over, or set checkpoint.resume=true to go on from them"}
    assert len(hub.commits) == commits and hub.repos["team/run-ckpts"] == held
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [".refused-start.rank0"]  # nothing but the marker
    if not by_key:
        return
    # a hub that cannot be listed is no all-clear: refused, saying why (the client offline: it fails at once,
    # where a stopped hub costs its ~25 s of retries)
    env["HF_HUB_OFFLINE"] = "1"
    offline = run("c")
    assert offline.returncode == 2
    said = [line for line in offline.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and said[0].startswith(f"error: cannot check the HF Hub repo team/run-ckpts ({setting}) for "
                                                 "an earlier run's checkpoints (") and \
        said[0].endswith("): try again when the hub answers, or set checkpoint.resume=true"), offline.stderr[-2000:]
