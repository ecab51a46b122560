"""Checkpoint copies of record as W&B artifacts (recovery.wandb_artifacts, recipes/wandb_artifacts.py,
issue 40 item 4).

Saving goes through the real wandb library into an offline run (what `wandb sync` uploads later).
Listing and downloading need W&B's server, which cannot run here: ArtifactsStandIn below is a
stand-in for it, holding versions as W&B does (name, version, state, metadata, files), through the
same three calls WandbArtifacts makes. Planted versions (a pickle that would run code, an extra
.pkl file, a file that does not match its manifest) are refused; the newest complete good one is
restored; the canary the payload would create never appears.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from core.domain.recovery import RecoverySettings
from recipes.checkpoint_store import CheckpointStore, rank_files
from recipes.wandb_artifacts import ENV, ArtifactMirror, WandbArtifacts, _sha256, mirror_from_env


class ArtifactsStandIn:
    """A stand-in for W&B's artifact server: versions per name, in memory, states as W&B reports them."""

    def __init__(self) -> None:
        self.store: dict[str, list[dict]] = {}
        self.downloaded: list[tuple[str, str]] = []  # (name, version) in the order asked

    def publish(self, name: str, files: list[Path], metadata: dict, alias: str) -> None:
        self.plant(name, {p.name: p.read_bytes() for p in files}, metadata)

    def plant(self, name: str, files: dict[str, bytes], metadata: dict, state: str = "COMMITTED") -> None:
        versions = self.store.setdefault(name, [])
        versions.append({"version": f"v{len(versions)}", "state": state, "metadata": dict(metadata),
                         "files": dict(files)})

    def versions(self, name: str) -> list[dict]:
        return [{**v, "files": sorted(v["files"])} for v in self.store.get(name, [])]

    def download(self, name: str, version: str, dest: Path) -> Path:
        (found,) = [v for v in self.store[name] if v["version"] == version]
        self.downloaded.append((name, version))
        for file, data in found["files"].items():
            (dest / file).write_bytes(data)
        return dest


class _Payload:
    """Pickles to a call of `func(*args)`: what a planted checkpoint would run on load."""

    def __init__(self, func, *args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _state(step: int) -> dict:
    return {"step": step, "model": {"w": torch.full((4,), float(step))}}


def _manifest(step: int, data: bytes) -> dict:
    import hashlib

    return {"step": step, "rank": 0, "file": "rank_0.pt", "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def _store(root: Path, mirror: ArtifactMirror) -> CheckpointStore:
    store = CheckpointStore(root, rank=0, keep=1)
    store.root, store.artifacts = root / "checkpoints", mirror
    return store


def test_saved_listed_and_restored_newest_complete_first_planted_ones_refused(tmp_path, capsys):
    stand_in = ArtifactsStandIn()
    mirror = ArtifactMirror(stand_in, "ws 1/../x")  # a workspace id is made a safe artifact name
    assert mirror.name(0) == "ws-1-..-x-rank0"
    node_a = _store(tmp_path / "a", mirror)
    for step in (10, 20, 30):
        node_a.save(step, _state(step))
    assert [v["metadata"]["step"] for v in stand_in.versions(mirror.name(0))] == [10, 20, 30]
    assert node_a.steps_on_disk() == [30]  # keep=1: the older ones live on W&B only

    canary = tmp_path / "canary"
    code = tmp_path / "code.pt"
    torch.save({"model": _Payload(os.system, f"touch {canary}")}, code)
    good = (tmp_path / "a" / "checkpoints" / "step_00000030" / "rank_0.pt").read_bytes()
    bad = code.read_bytes()
    name = mirror.name(0)
    stand_in.plant(name, {"rank_0.pt": good, "rank_0.json": json.dumps(_manifest(40, good)).encode()},
                   _manifest(40, good), state="PENDING")  # not committed: never listed
    stand_in.plant(name, {"rank_0.pt": good, "rank_0.json": json.dumps(_manifest(50, good)).encode(),
                          "model.pkl": b"\x80\x04planted"}, _manifest(50, good))  # a file besides the two
    stand_in.plant(name, {"rank_0.pt": bad, "rank_0.json": json.dumps(_manifest(60, bad)).encode()},
                   _manifest(60, bad))  # a pickle that would run code, its sha256 honest
    stand_in.plant(name, {"rank_0.pt": bad, "rank_0.json": json.dumps(_manifest(70, good)).encode()},
                   _manifest(70, good))  # the file is not the one its manifest names
    assert [step for step, _ in mirror.listed(0)] == [70, 60, 30, 20, 10]  # newest first; 40 incomplete, 50 refused at listing

    node_b = _store(tmp_path / "b", mirror)  # a new node: nothing on disk
    capsys.readouterr()
    assert node_b.newest_complete() == 30
    warned = capsys.readouterr().err
    assert "step 70) is refused: the checkpoint does not match the sha256 in its manifest" in warned
    assert "step 60) is refused: it would build objects a checkpoint may not hold" in warned
    assert "step 50) is refused: it holds model.pkl, not just rank_0.json and rank_0.pt: skipped" in warned
    assert not canary.exists()  # nothing planted ran
    (v50,) = [v["version"] for v in stand_in.store[name] if v["metadata"]["step"] == 50]
    assert (name, v50) not in stand_in.downloaded and (name, "v2") in stand_in.downloaded  # step 50 never fetched
    assert torch.equal(node_b.load(30)["model"]["w"], torch.full((4,), 30.0))
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir()) == ["step_00000030"]  # no leftovers
    data_path, manifest_path = rank_files(node_b.root, 30, 0)
    assert json.loads(manifest_path.read_text())["sha256"] == _sha256(data_path)

    node_a.save(80, _state(80))  # a newer one on disk than on W&B is what a start takes
    assert node_a.newest_complete() == 80


def test_a_checkpoint_goes_into_the_offline_w_and_b_run(tmp_path, monkeypatch):
    """The real wandb library, offline: the artifact, its alias and its manifest are in the run's file."""
    import wandb

    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
                       "WANDB_DATA_DIR": str(tmp_path / "data"), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
                       "WANDB_CONFIG_DIR": str(tmp_path / "config")}.items():
        monkeypatch.setenv(key, value)
    store = _store(tmp_path / "run", ArtifactMirror(WandbArtifacts(project="geotrain-test"), "ws-off"))
    run = wandb.init(project="geotrain-test", dir=str(tmp_path))
    try:
        store.save(12, _state(12))
    finally:
        run.finish()
    (record,) = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    written = record.read_bytes()
    sha = json.loads(rank_files(store.root, 12, 0)[1].read_text())["sha256"]
    for part in (b"ws-off-rank0", b"geotrain-checkpoint", b"step-00000012", sha.encode(), b"rank_0.pt", b"rank_0.json"):
        assert part in written, part


def test_the_setting_reaches_the_workers_and_needs_a_workspace(monkeypatch, capsys):
    assert RecoverySettings.from_dict({"wandb_artifacts": True}).worker_env(None)[ENV] == "1"
    assert ENV not in RecoverySettings.from_dict({}).worker_env(None)
    with pytest.raises(Exception, match="recovery.wandb_artifacts: expected true or false"):
        RecoverySettings.from_dict({"wandb_artifacts": "yes"})
    monkeypatch.setenv(ENV, "1")
    monkeypatch.delenv("GEOTRAIN_WORKSPACE", raising=False)
    assert mirror_from_env() is None and "GEOTRAIN_WORKSPACE is not" in capsys.readouterr().err
    monkeypatch.setenv("GEOTRAIN_WORKSPACE", "ws-9")
    assert mirror_from_env().name(1) == "ws-9-rank1"
