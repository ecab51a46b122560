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

from core.backends.export import MANIFEST, check_destination, read_export
from core.errors import InvalidInput
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
                        ("missing/deeper", "does not exist")):
        with pytest.raises(InvalidInput, match=words):
            check_destination(tmp_path / name)
    check_destination(tmp_path / "new")  # absent is fine
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
