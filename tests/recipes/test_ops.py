"""Operations: HF Hub uploads (local stand-ins), W&B offline runs, and secrets staying out of everything."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from recipes.hub import HubUploader
from tests.recipes.conftest import REPO, read_metrics, recipe_env

WANDB_SECRET = "wandbkey-0123456789abcdef0123456789abcdef"
HF_SECRET = "hf_SecretTokenValue0123456789"


class RecordingHub:
    """Stands in for huggingface_hub.HfApi: records calls, can fail the first upload."""

    def __init__(self, fail_first: bool = False) -> None:
        self.calls, self.fail_first = [], fail_first

    def create_repo(self, repo_id, private, exist_ok):
        self.calls.append(("create_repo", repo_id, private))

    def upload_file(self, path_or_fileobj, path_in_repo, repo_id, commit_message):
        if self.fail_first:
            self.fail_first = False
            raise ConnectionError(f"hub unreachable (token {HF_SECRET})")
        assert Path(path_or_fileobj).is_file()
        self.calls.append(("upload_file", path_in_repo, repo_id))


def _checkpoint(tmp_path: Path, step: int) -> Path:
    path = tmp_path / "checkpoints" / f"step_{step:08d}" / "rank_0.pt"
    path.parent.mkdir(parents=True)
    torch.save({"step": step}, path)
    return path


def test_uploader_creates_repo_once_and_uploads_in_order(tmp_path):
    hub = RecordingHub()
    up = HubUploader("me/run", private=True, api=hub)
    up.upload(_checkpoint(tmp_path, 10))
    up.upload(_checkpoint(tmp_path, 20))
    up.wait()
    assert hub.calls == [("create_repo", "me/run", True),
                         ("upload_file", "checkpoints/step_00000010/rank_0.pt", "me/run"),
                         ("upload_file", "checkpoints/step_00000020/rank_0.pt", "me/run")]


def test_the_manifest_goes_up_after_its_checkpoint_so_a_pull_can_be_checked(tmp_path):
    hub = RecordingHub()
    path = _checkpoint(tmp_path, 10)
    path.with_suffix(".json").write_text('{"sha256": "..."}')  # recipes.checkpoint_store writes it
    up = HubUploader("me/run", api=hub)
    up.upload(path)
    up.wait()
    assert hub.calls[1:] == [("upload_file", "checkpoints/step_00000010/rank_0.pt", "me/run"),
                             ("upload_file", "checkpoints/step_00000010/rank_0.json", "me/run")]


def test_upload_failure_is_reported_redacted_and_later_uploads_go_on(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    hub = RecordingHub(fail_first=True)
    up = HubUploader("me/run", api=hub)
    up.upload(_checkpoint(tmp_path, 10))
    up.upload(_checkpoint(tmp_path, 20))
    up.wait()
    out = capsys.readouterr().out
    assert up.failures == 1 and "failed" in out and "training continues" in out
    assert HF_SECRET not in out
    assert hub.calls[-1] == ("upload_file", "checkpoints/step_00000020/rank_0.pt", "me/run")


def test_without_token_uploads_are_skipped_with_a_message(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    up = HubUploader("me/run")
    up.upload(_checkpoint(tmp_path, 1))
    up.wait()
    assert "HF_TOKEN is not set" in capsys.readouterr().out


def test_training_with_tokens_keeps_them_out_of_logs_checkpoints_and_wandb(tmp_path, tiny_gpt):
    """Real huggingface_hub client against an endpoint that refuses connections; W&B offline."""
    out = tmp_path / "run"
    env = recipe_env(WANDB_API_KEY=WANDB_SECRET, HF_TOKEN=HF_SECRET, HF_ENDPOINT="http://127.0.0.1:9",
                     HF_HUB_OFFLINE="0")
    res = subprocess.run(["python", "-m", "recipes.train", "--config", str(tiny_gpt), f"out_dir={out}",
                          "steps=20", "checkpoint.every=10", "checkpoint.hf_repo=me/tiny", "logging.log_every=5"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "failed" in res.stdout and "training continues" in res.stdout  # the hub was down; training finished
    assert "[rank 0] done" in res.stdout
    runs = list((out / "wandb").glob("offline-run-*"))
    assert runs, "W&B ran offline under out_dir/wandb"
    assert len(read_metrics(out)) >= 4
    for path in [p for p in out.rglob("*") if p.is_file()]:
        blob = path.read_bytes()
        assert WANDB_SECRET.encode() not in blob and HF_SECRET.encode() not in blob, path
    for secret in (WANDB_SECRET, HF_SECRET):
        assert secret not in res.stdout + res.stderr
