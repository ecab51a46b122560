"""Results kept: `workspaces export ID DIR` and `deploy --resume-from DIR`.

The restore test runs real torchrun workers on gloo twice: a workspace trains and
checkpoints, is exported (with links planted in its directory), deleted, and a new
workspace started from the export continues at the exported step.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.backends import export as export_mod
from core.backends.export import MANIFEST, check_destination, read_export, seed_checkpoints, walk_files
from core.backends.local.backend import LocalBackend
from core.errors import InvalidInput
from core.state.secret_store import SecretStore
from core.workspaces import DeployRequest, WorkspaceService

ROOT = Path(__file__).resolve().parents[2]
FAST = ["logging.wandb=false", "logging.log_every=2", "checkpoint.every=2", "logging.eval_batches=0"]


def _wait(service, workspace_id, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = service.status(workspace_id)
        if state.status in ("COMPLETED", "FAILED"):
            return state
        time.sleep(0.5)
    raise AssertionError(f"{workspace_id} did not end; last {state}")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_local_workspace_exported_then_restored_continues_at_its_step(tmp_path, geotrain_home):
    service = WorkspaceService()
    first = service.deploy(service.build_spec(DeployRequest(steps=4, workers=1, sets=tuple(FAST))), {})
    state = _wait(service, first.id)
    assert state.status == "COMPLETED", list(service.logs(first.id))[-20:]
    run_dir = Path(first.run_dir)
    secret = tmp_path / "private.txt"
    secret.write_text("not for export")
    (run_dir / "logs" / "planted.log").symlink_to(secret)  # a process of the workspace could do this
    (run_dir / "out" / "checkpoints" / "step_00000009").symlink_to(tmp_path)

    dest = tmp_path / "exports" / "run1"
    dest.parent.mkdir()
    manifest = service.export(first.id, str(dest))
    assert manifest["checkpoint_steps"] == [2, 4]
    assert {"logs/planted.log", "checkpoints/step_00000009"} <= set(manifest["skipped"])
    for name in ("config.yaml", "spec.yaml", "metrics.jsonl", "logs/worker-0.log",
                 "checkpoints/step_00000004/rank_0.pt", "checkpoints/step_00000004/rank_0.json"):
        assert (dest / name).is_file() and name in manifest["files"], name
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert all(b"not for export" not in p.read_bytes() for p in dest.rglob("*") if p.is_file())
    assert "tokens" not in (dest / "spec.yaml").read_text()
    assert not [p for p in dest.parent.iterdir() if p.name != "run1"], "no staging left behind"

    again = _cli("workspaces", "export", first.id, str(dest))  # never over an export
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "already holds a geotrain export" in again.stderr
    service.delete(first.id)

    export = read_export(dest)
    assert (export.step, export.ranks) == (4, 1)
    spec = service.build_spec(DeployRequest(steps=8, config_text=export.spec_text, config_source="spec.yaml"))
    second = service.deploy(spec, {}, resume_from=export)
    state = _wait(service, second.id)
    log = "\n".join(line for _, line in service.logs(second.id))
    assert state.status == "COMPLETED", log[-3000:]
    assert "[rank 0] resumed from checkpoint at step 4" in log
    assert "step 2/8" not in log and "step 6/8" in log  # trained 5..8 only
    steps = [row["step"] for row in service.metrics(second.id)]
    assert steps == [2, 4, 6, 8]  # the exported curve, then the continued one
    service.delete(second.id)


def test_destination_must_be_new_or_empty(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / MANIFEST).write_text("{}")
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "full")
    for name, words in (("full", "is not empty"), ("done", "already holds a geotrain export"),
                        ("file", "is not a directory"), ("link", "is not a directory"),
                        ("missing/deeper/still", "does not exist")):
        with pytest.raises(InvalidInput, match=words):
            check_destination(tmp_path / name)
    check_destination(tmp_path / "new")  # absent is fine
    check_destination(tmp_path / "exports" / "first")  # a missing parent is made (~/geotrain-exports)
    (tmp_path / "empty").mkdir()
    check_destination(tmp_path / "empty")


def test_resume_from_a_folder_that_is_not_an_export_is_one_line(tmp_path):
    (tmp_path / "stuff").mkdir()
    out = _cli("workspaces", "deploy", "distributed-training", "--resume-from", str(tmp_path / "stuff"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "is not a geotrain export" in out.stderr
    export = tmp_path / "exp"
    (export / "checkpoints" / "step_00000004").mkdir(parents=True)
    (export / MANIFEST).write_text(json.dumps({"format": 1}))
    (export / "spec.yaml").write_text("model: gpt-neo\n")
    (export / "checkpoints" / "step_00000004" / "rank_0.pt").write_bytes(b"x")  # no manifest: incomplete
    with pytest.raises(InvalidInput, match="holds no checkpoint"):
        read_export(export)
    (export / "checkpoints" / "step_00000004" / "rank_0.json").write_text("{}")
    assert (read_export(export).step, read_export(export).ranks) == (4, 1)
    out = _cli("workspaces", "deploy", "distributed-training", "--resume-from", str(export), "--workers", "2")
    assert out.returncode == 2 and "deploy with --workers 1" in out.stderr
    assert WorkspaceService().list() == []  # nothing recorded, nothing left


def _export_dir(root: Path, ranks: int = 2, spec: str | None = None) -> Path:
    """An export as `workspaces export` writes it (small files, two ranks at step 4)."""
    (root / "checkpoints" / "step_00000004").mkdir(parents=True)
    (root / MANIFEST).write_text(json.dumps({"format": 1}))
    (root / "spec.yaml").write_text(spec or "model: gpt-neo\ncluster: elsewhere\nworkers: 2\n"
                                    "recovery:\n  checkpoint_dir: /root/.ssh\n  hf_repo: me/ckpt\n")
    for rank in range(ranks):
        (root / "checkpoints" / "step_00000004" / f"rank_{rank}.pt").write_bytes(b"w%d" % rank)
        (root / "checkpoints" / "step_00000004" / f"rank_{rank}.json").write_text("{}")
    (root / "metrics.jsonl").write_text('{"step": 4, "loss": 1.0}\n')
    return root


def test_the_imported_spec_keeps_neither_cluster_nor_checkpoint_dir_and_is_read_with_limits(tmp_path):
    export = read_export(_export_dir(tmp_path / "exp"))
    assert "cluster" not in export.spec_text and "checkpoint_dir" not in export.spec_text
    assert "hf_repo: me/ckpt" in export.spec_text and (export.step, export.ranks) == (4, 2)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    with pytest.raises(InvalidInput, match="spec.yaml"):
        read_export(_export_dir(tmp_path / "bomb", spec=bomb))
    linked = _export_dir(tmp_path / "linked")
    (linked / "spec.yaml").unlink()
    (linked / "spec.yaml").symlink_to(tmp_path / "exp" / "spec.yaml")
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_export(linked)


def test_seeding_refuses_a_used_checkpoint_dir_and_leaves_nothing_half_done(tmp_path, monkeypatch):
    export = read_export(_export_dir(tmp_path / "exp"))
    used = tmp_path / "used"
    used.mkdir()
    (used / "theirs.pt").write_bytes(b"x")
    with pytest.raises(InvalidInput, match="is not empty"):
        seed_checkpoints(export, used, tmp_path / "out")
    real_copy = export_mod.copy_plain_file

    def vanishing(src, dst, anchor=None):  # a test double for a rank file gone between listing and reading
        return None if dst.name == "rank_1.pt" else real_copy(src, dst, anchor)
    monkeypatch.setattr(export_mod, "copy_plain_file", vanishing)
    (tmp_path / "out").mkdir()
    with pytest.raises(InvalidInput, match="rank_1.pt"):
        seed_checkpoints(export, tmp_path / "fresh", tmp_path / "out")
    assert not [p for p in (tmp_path / "fresh").rglob("*") if p.is_file()]
    monkeypatch.setattr(export_mod, "copy_plain_file", real_copy)
    written = seed_checkpoints(export, tmp_path / "fresh", tmp_path / "out")
    assert len(written) == 5 and (tmp_path / "fresh" / "step_00000004" / "rank_1.pt").read_bytes() == b"w1"


def test_a_linked_out_folder_is_not_followed(tmp_path):
    run_dir, elsewhere = tmp_path / "ws" / "gpt-neo-aaaaaa", tmp_path / "elsewhere"
    (elsewhere / "checkpoints" / "step_00000002").mkdir(parents=True)
    (elsewhere / "checkpoints" / "step_00000002" / "rank_0.pt").write_text("not for export")
    (elsewhere / "metrics.jsonl").write_text("not for export")
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("steps: 2\n")
    (run_dir / "out").symlink_to(elsewhere)  # a process of the workspace could swap it in
    files = LocalBackend(tmp_path / "ws").result_files(run_dir.name, _spec())
    skipped: list[str] = []
    assert list(walk_files(files["checkpoints"], skipped, "checkpoints/", export_mod._anchor(files))) == []
    assert skipped == ["checkpoints/"]
    assert export_mod.copy_plain_file(files["metrics.jsonl"], tmp_path / "m", export_mod._anchor(files)) is None
    assert export_mod.copy_plain_file(files["config.yaml"], tmp_path / "c", export_mod._anchor(files)) == (
        9, __import__("hashlib").sha256(b"steps: 2\n").hexdigest())


def _spec():
    from core.domain.records import WorkspaceSpec
    return WorkspaceSpec(cluster="local", model="gpt-neo", size="tiny", preset="medium", workers=2, steps=8)


def test_export_errors_of_the_file_system_are_one_line(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()

    def full(*args, **kwargs):  # a test double for a full disk while writing the export
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(export_mod, "_fill", full)
    with pytest.raises(InvalidInput, match="No space left on device"):
        export_mod.export_workspace(LocalBackend(tmp_path / "ws"), _record(), locked / "run1")
    assert list(locked.iterdir()) == []  # no staging left

    def small(backend, ws, out):  # a test double for the copying itself (the slow test runs it)
        (out / MANIFEST).write_text("{}")
        return {}
    monkeypatch.setattr(export_mod, "_fill", small)
    export_mod.export_workspace(LocalBackend(tmp_path / "ws"), _record(), tmp_path / "geotrain-exports" / "run1")
    assert (tmp_path / "geotrain-exports" / "run1" / MANIFEST).is_file()  # the default parent, made on first use
    assert (tmp_path / "geotrain-exports").stat().st_mode & 0o777 == 0o700


def _record():
    from core.domain.records import Workspace
    return Workspace(id="gpt-neo-aaaaaa", spec=_spec(), status="COMPLETED", created_at=1.0, updated_at=1.0)


class _FailingLocal(LocalBackend):
    """The real local backend whose launch and cleanup fail (test double for a broken host)."""

    def deploy(self, workspace_id, spec, tokens):
        raise RuntimeError("launch failed")

    def delete(self, workspace_id):
        raise OSError("cleanup failed too")


def test_a_failed_restore_deploy_leaves_no_row_token_or_seeded_file(tmp_path, monkeypatch):
    service = WorkspaceService()
    export = read_export(_export_dir(tmp_path / "exp"))
    spec = service.build_spec(DeployRequest(steps=8, workers=2, sets=tuple(FAST)))
    spec.recovery = {**(spec.recovery or {}), "checkpoint_dir": str(tmp_path / "kept")}
    monkeypatch.setattr(service, "backend", lambda cluster: _FailingLocal())
    with pytest.raises(RuntimeError, match="launch failed"):
        service.deploy(spec, {"wandb": "k" * 40}, resume_from=export)
    assert service.list() == [] and SecretStore().values() == []
    assert (tmp_path / "kept").is_dir()  # it was seeded …
    assert not [p for p in (tmp_path / "kept").rglob("*") if p.is_file()]  # … and emptied again

    class NoRestore(LocalBackend):
        check_restore = LocalBackend.__mro__[1].check_restore  # the base class's refusal
    monkeypatch.setattr(service, "backend", lambda cluster: NoRestore())
    with pytest.raises(InvalidInput, match="local cluster only"):
        service.deploy(spec, {"wandb": "k" * 40}, resume_from=export)
    assert service.list() == [] and SecretStore().values() == []
