"""`custom-training` on `local` end to end, as the catalog workspace is tested: the user's own
command (tests/examples/train_plain.py with geotrain_loop at medium) deployed from the CLI on 2
real workers -> RUNNING -> its curves and both workers' logs in the app (Pilot) -> COMPLETED ->
export -> delete, leaving no process and no file."""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.backends.local.supervisor import workspace_processes
from core.workspaces import WorkspaceService
from tests.core.test_local_workspace import _wait
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.widgets.log_view import LogView
from tui.widgets.loss_chart import LossChart

ROOT = Path(__file__).resolve().parents[2]
STEPS = 120


@pytest.mark.slow
def test_custom_training_deploy_running_curves_logs_export_delete(geotrain_home, tmp_path):
    deployed = subprocess.run(
        [sys.executable, "-m", "core.cli", "workspaces", "deploy", "custom-training", "--workers", "2", "--yes",
         "--workdir", str(ROOT / "tests" / "examples"), "--json",
         "--command", f"python train_plain.py --mode api --preset medium --steps {STEPS}"],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert deployed.returncode == 0, deployed.stderr
    workspace_id = json.loads(deployed.stdout)["id"]
    service = WorkspaceService()
    spec = service.get(workspace_id).spec
    assert (spec.template, spec.command[1:3]) == ("custom-training", ["train_plain.py", "--mode"])
    assert _wait(service, workspace_id, {"RUNNING", "COMPLETED"}, 240).status in ("RUNNING", "COMPLETED")

    app = make_app(service, poll_seconds=0.5)

    async def watch():
        async with app.run_test(size=(120, 40)) as pilot:
            app.push_screen(WorkspaceDetailScreen(workspace_id))
            await on_screen(pilot, WorkspaceDetailScreen)
            view = app.screen.query_one(LogView)
            await until(pilot, lambda: {w for w, *_ in view._lines} >= {"worker-0", "worker-1"}, 120)
            await until(pilot, lambda: app.screen.query_one("#loss", LossChart).points != [], 120)
            await until(pilot, lambda: app.screen.query_one("#bytes", LossChart).points[-1][1] > 0, 120)
            return list(view._lines)
    lines = asyncio.run(watch())
    assert any("geotrain_loop: preset medium" in str(line) for line in lines)

    state = _wait(service, workspace_id, {"COMPLETED", "FAILED"}, 240)
    assert state.status == "COMPLETED", list(service.logs(workspace_id))[-10:]
    rows = service.metrics(workspace_id)
    assert rows[-1]["step"] == STEPS and rows[-1]["bytes_sent"] > 0 and "loss" in rows[0]
    run_dir = Path(service.get(workspace_id).run_dir)

    dest = tmp_path / "export"
    manifest = service.export(workspace_id, str(dest))
    assert (dest / "metrics.jsonl").read_text().count("\n") == len(rows), manifest
    assert "train_plain.py" in (dest / "spec.yaml").read_text()

    service.delete(workspace_id)
    assert not run_dir.exists() and workspace_processes(workspace_id) == []
    assert (ROOT / "tests" / "examples" / "train_plain.py").exists()  # the user's directory is theirs


def test_the_deploy_form_offers_custom_training(geotrain_home, tmp_path):
    """The form's template custom-training shows a command and directory; a command that cannot be split is
    said inline and nothing is deployed; a good one deploys and opens the workspace."""
    from textual.widgets import Input, Select, Static

    from tui.screens.workspace_deploy import DeployScreen

    (tmp_path / "train.py").write_text("print('[rank 0] step 1/1 loss 1.0', flush=True)\n")
    service = WorkspaceService()
    app = make_app(service, poll_seconds=0.5)

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("c")
            await on_screen(pilot, DeployScreen)
            form = app.screen
            assert not form.query_one("#custom-row").display
            form.query_one("#template", Select).value = "custom-training"
            await until(pilot, lambda: form.query_one("#custom-row").display)
            form.query_one("#workdir", Input).value = str(tmp_path)
            form.query_one("#command", Input).value = "python 'train.py"
            await pilot.press("ctrl+s")
            error = form.query_one("#form-error", Static)
            await until(pilot, lambda: "cannot be split" in str(error.render()))
            assert service.list(refresh=False) == []
            form.query_one("#command", Input).value = "python train.py"
            await pilot.press("ctrl+s")
            await on_screen(pilot, WorkspaceDetailScreen, 60)
            return app.screen.workspace_id
    workspace_id = asyncio.run(run())
    spec = service.get(workspace_id).spec
    assert (spec.template, spec.command, spec.workdir) == ("custom-training", ["python", "train.py"], str(tmp_path))
    assert _wait(service, workspace_id, {"COMPLETED", "FAILED"}, 120).status == "COMPLETED"
    service.delete(workspace_id)
