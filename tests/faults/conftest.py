import pytest

from core.workspaces import WorkspaceService


@pytest.fixture(autouse=True)
def geotrain_home(tmp_path, monkeypatch):
    """Each fault test gets its own state directory (real SQLite, real run directories);
    whatever it deployed is deleted afterwards, pass or fail, so no process outlives it."""
    home = tmp_path / "home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield home
    service = WorkspaceService()
    for ws in service.list(refresh=False):
        keep = home.parent / "kept" / ws.id
        if ws.run_dir:
            import shutil

            shutil.copytree(ws.run_dir, keep, ignore=shutil.ignore_patterns("*.pt"), dirs_exist_ok=True)
        service.delete(ws.id)
