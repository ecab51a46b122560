"""Hostile checkpoints and checkpoint locations (issue 12 item 2).

A pod of another workspace, or whoever can write to a checkpoint directory or an HF repo,
plants a checkpoint whose pickle would run code when loaded. Each is refused with one
warning line and skipped like a corrupt file; the older good checkpoint is used; the
canary file that the payload would create never appears. Bad `recovery.host_path` values
(system directories, `..`, control characters) and bad claim names are one-line errors
that change nothing. The HF Hub is HubStandIn, a stand-in (the Hub is unreachable here),
reached through the real `huggingface_hub` client.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import pickle
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import yaml

from core.cli import main
from core.errors import FieldError
from core.domain.records import WorkspaceSpec
from recipes.checkpoint_store import CheckpointRefused, CheckpointStore, rank_files
from tests.faults.hub_stand_in import HubStandIn


class _Payload:
    """Pickles to a call of `func(*args)`: what a planted checkpoint would run on load."""

    def __init__(self, func, *args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _payloads(canary: Path) -> dict[str, object]:
    touch = f"touch {canary}"
    return {
        "os.system": _Payload(os.system, touch),
        "builtins.exec": _Payload(builtins.exec, f"open({str(canary)!r}, 'w').close()"),
        "builtins.eval": _Payload(builtins.eval, f"open({str(canary)!r}, 'w').close()"),
        "subprocess.call": _Payload(subprocess.call, ["touch", str(canary)]),
        "shutil.copyfile": _Payload(shutil.copyfile, "/etc/hostname", str(canary)),
        "pathlib.Path.touch via getattr": _Payload(getattr, Path(canary), "touch"),
    }


PAYLOADS = list(_payloads(Path("/x")))
FORMATS = ["torch.save zip", "bare pickle"]


def _plant(path: Path, obj, fmt: str) -> None:
    """Write `obj` as a checkpoint would be written, and a manifest that matches it
    (whoever can write the file can write its manifest)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "torch.save zip":
        torch.save(obj, path)
    else:
        path.write_bytes(pickle.dumps(obj, protocol=2))
    data = path.read_bytes()
    manifest = {"step": int(path.parent.name[5:]), "rank": 0, "file": path.name,
                "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    path.with_suffix(".json").write_text(json.dumps(manifest))


def _good(step: int) -> dict:
    return {"step": step, "model": {"w": torch.full((8,), float(step))}}


@pytest.fixture
def local_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("GEOTRAIN_CHECKPOINT_HF_REPO", raising=False)
    monkeypatch.setenv("GEOTRAIN_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    return tmp_path / "ckpt"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_planted_pickle_in_the_checkpoint_dir_is_refused_and_runs_nothing(payload, fmt, local_dir, tmp_path, capsys):
    canary = tmp_path / "canary"
    store = CheckpointStore(tmp_path / "out", rank=0, keep=5)
    store.save(8, _good(8))
    evil = _payloads(canary)[payload]
    # alone, or hidden inside an otherwise ordinary checkpoint
    _plant(rank_files(local_dir, 16, 0)[0], {**_good(16), "config": {"note": evil}}, fmt)
    capsys.readouterr()

    assert store.newest_complete() == 8
    warning = capsys.readouterr().err.strip()
    assert len(warning.splitlines()) == 1, warning
    assert "step_00000016/rank_0.pt is refused" in warning and warning.endswith("skipped")
    with pytest.raises(CheckpointRefused):
        store.load(16)
    assert store.load(8)["model"]["w"][0] == 8.0
    assert not canary.exists()


@pytest.mark.parametrize("planted, why", [
    ([1, 2, 3], "holds a list, not a checkpoint mapping"),
    (b"not a pickle at all", "not a readable checkpoint"),
])
def test_a_checkpoint_that_is_not_a_state_mapping_is_refused(planted, why, local_dir, tmp_path, capsys):
    path = rank_files(local_dir, 16, 0)[0]
    if isinstance(planted, bytes):
        _plant(path, None, "bare pickle")
        path.write_bytes(planted)
        data = path.read_bytes()
        path.with_suffix(".json").write_text(json.dumps(
            {"step": 16, "rank": 0, "file": path.name, "bytes": len(data),
             "sha256": hashlib.sha256(data).hexdigest()}))
    else:
        _plant(path, planted, "torch.save zip")
    assert CheckpointStore(tmp_path / "out", rank=0).newest_complete() is None
    assert why in capsys.readouterr().err


@contextmanager
def _mirror_holding_step_8(repo: str, tmp_path: Path, monkeypatch):
    """HubStandIn as the workspace's recovery.hf_repo, holding a good step 8 that node-a wrote."""
    hub = HubStandIn()
    monkeypatch.setenv("HF_ENDPOINT", hub.start())
    monkeypatch.setenv("HF_TOKEN", "hf_standin_secret_0123456789")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("GEOTRAIN_CHECKPOINT_HF_REPO", repo)
    monkeypatch.delenv("GEOTRAIN_CHECKPOINT_DIR", raising=False)
    try:
        first = CheckpointStore(tmp_path / "node-a", rank=0)
        first.save(8, _good(8))
        first.wait()
        yield hub
    finally:
        hub.stop()


@pytest.mark.parametrize("payload", ["os.system", "subprocess.call"])
def test_a_planted_checkpoint_on_the_hub_is_refused_and_runs_nothing(payload, tmp_path, monkeypatch, capsys):
    # a repo name of its own: huggingface_hub reads HF_HOME once per process, so another
    # test's cached "team/run-ckpts" files would otherwise be served from its cache
    repo = f"team/hostile-{payload.replace('.', '-')}"
    with _mirror_holding_step_8(repo, tmp_path, monkeypatch) as hub:
        canary = tmp_path / "canary"
        staged = tmp_path / "staged" / "step_00000016" / "rank_0.pt"
        _plant(staged, {**_good(16), "x": _payloads(canary)[payload]}, "torch.save zip")
        files = hub.repos[repo]
        files["checkpoints/step_00000016/rank_0.pt"] = staged.read_bytes()
        files["checkpoints/step_00000016/rank_0.json"] = staged.with_suffix(".json").read_bytes()
        capsys.readouterr()

        fresh = CheckpointStore(tmp_path / "node-b", rank=0)  # a new node pulls from the hub
        assert fresh.newest_complete() == 8
        err = capsys.readouterr().err
        assert "step_00000016/rank_0.pt is refused" in err
        assert torch.equal(fresh.load(8)["model"]["w"], _good(8)["model"]["w"])
        assert not canary.exists()


def test_weights_planted_in_a_shared_hf_cache_are_not_resumed(tmp_path, monkeypatch, capsys):
    """Issue 38.3: another workspace on the node plants plain weights (and a manifest that matches
    them) in the HF cache where huggingface_hub would find the hub checkpoint; it returned them
    unchecked, and the workspace resumed from them. Now the download bypasses every HF cache."""
    import huggingface_hub.constants

    shared = tmp_path / "node-cache" / "huggingface" / "hub"  # what HF_HOME on the node's cache meant
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(shared))  # read at import otherwise
    with _mirror_holding_step_8("team/planted-cache", tmp_path, monkeypatch):
        cached = shared / "models--team--planted-cache"
        commit = "0" * 40  # the revision the stand-in names (X-Repo-Commit)
        planted = cached / "snapshots" / commit / "checkpoints" / "step_00000008" / "rank_0.pt"
        _plant(planted, {**_good(8), "model": {"w": torch.full((8,), 666.0)}}, "torch.save zip")
        (cached / "refs").mkdir(parents=True)
        (cached / "refs" / "main").write_text(commit)

        resumed = CheckpointStore(tmp_path / "node-b", rank=0)  # the workspace, resumed on a fresh disk
        assert resumed.newest_complete() == 8
        assert torch.equal(resumed.load(8)["model"]["w"], _good(8)["model"]["w"])
        assert not [p for p in (tmp_path / "node-b" / "checkpoints").iterdir() if p.name.startswith(".hub-")]


def test_a_checkpoint_changed_after_its_check_is_refused_at_load(local_dir, tmp_path):
    """Every load checks the manifest's sha256, not only newest_complete() before it."""
    store = CheckpointStore(tmp_path / "out", rank=0)
    store.save(8, _good(8))
    assert store.newest_complete() == 8
    torch.save({**_good(8), "model": {"w": torch.full((8,), 666.0)}}, rank_files(local_dir, 8, 0)[0])
    with pytest.raises(CheckpointRefused, match=r"does not match the sha256 in its manifest rank_0\.json .*"
                                                r"remove step_00000008 to resume from an older checkpoint"):
        store.load(8)


SPEC = {"cluster": "dc", "model": "gpt-neo", "size": "tiny", "preset": "none", "workers": 1, "steps": 5}
BAD_HOST_PATHS = ["/", "/etc", "/etc/cron.d", "/usr", "/usr/local/bin", "/bin", "/sbin", "/lib",
                  "/lib64", "/boot", "/dev", "/proc", "/sys", "/run", "/var/run", "/root", "/root/ckpt",
                  "/home", "/var/lib/kubelet/pods", "/var/lib/rancher/k3s", "/srv/../etc", "/srv/./x",
                  "/srv/x/", "//etc", "/srv/a\nb", "/srv/\x00", "relative/dir", "", 7]


@pytest.mark.parametrize("value", BAD_HOST_PATHS)
def test_a_bad_host_path_is_a_one_line_field_error(value):
    with pytest.raises(FieldError) as err:
        WorkspaceSpec.from_dict({**SPEC, "recovery": {"host_path": value}})
    assert err.value.path == "recovery.host_path" and err.value.hint
    assert "\n" not in str(err.value).replace(repr(value), "")


@pytest.mark.parametrize("key, value", [("pvc", "../other"), ("pvc", "Claim"), ("pvc", "a b"),
                                        ("pvc", "claim\n"), ("storage_class", "local path"),
                                        ("storage_class", "x" * 300)])
def test_a_bad_claim_or_class_name_is_a_one_line_field_error(key, value):
    with pytest.raises(FieldError) as err:
        WorkspaceSpec.from_dict({**SPEC, "recovery": {key: value}})
    assert err.value.path == f"recovery.{key}"


@pytest.mark.parametrize("value", ["/srv/geotrain", "/home/me/ckpt", "/data/checkpoints", "/var/lib/geotrain"])
def test_an_ordinary_host_path_is_accepted(value):
    spec = WorkspaceSpec.from_dict({**SPEC, "recovery": {"host_path": value}})
    assert spec.recovery["host_path"] == value


@pytest.mark.parametrize("value", ["/etc", "/srv/../root"])
def test_the_cli_answers_a_spec_with_a_system_host_path_in_one_line(value, tmp_path, monkeypatch, capsys):
    geotrain_home = tmp_path / "home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(geotrain_home))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "cluster": "local", "config": {}, "recovery": {"host_path": value}}))
    assert main(["workspaces", "deploy", "distributed-training", "--config", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "recovery.host_path" in err, err
    assert not (geotrain_home / "workspaces").exists() or not any((geotrain_home / "workspaces").iterdir())


@pytest.mark.parametrize("name", ["step_00000099\n", "step_00000099 ", "step_00000099.old", "xstep_00000099"])
def test_a_directory_that_only_looks_like_a_step_is_not_a_checkpoint(name, local_dir, tmp_path, capsys):
    store = CheckpointStore(tmp_path / "out", rank=0)
    store.save(8, _good(8))
    (local_dir / name).mkdir()
    (local_dir / name / "rank_0.pt").write_bytes(b"x")
    capsys.readouterr()
    assert store.steps_on_disk() == [8] and store.newest_complete() == 8
    assert capsys.readouterr().err == ""
