import shutil
from pathlib import Path

import pytest

from core.workspaces import WorkspaceService


@pytest.fixture(autouse=True)
def geotrain_home(tmp_path, monkeypatch):
    """Each fault test gets its own state directory (real SQLite, real run directories).
    Local workspaces it deployed are deleted afterwards, pass or fail, so no process
    outlives the test; their logs and history are kept under <tmp>/kept for a post-mortem."""
    home = tmp_path / "home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield home
    service = WorkspaceService()
    for ws in service.list(refresh=False):
        if ws.cluster != "local":
            continue
        if ws.run_dir and Path(ws.run_dir).is_dir():
            shutil.copytree(ws.run_dir, tmp_path / "kept" / ws.id,
                            ignore=shutil.ignore_patterns("*.pt"), dirs_exist_ok=True)
        service.delete(ws.id)
