import pytest


@pytest.fixture(autouse=True)
def geotrain_home(tmp_path, monkeypatch):
    """Every core test gets its own state directory (real SQLite, real files)."""
    home = tmp_path / "home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # a key is never checked at api.wandb.ai
    return home
