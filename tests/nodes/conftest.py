import pytest


@pytest.fixture(autouse=True)
def geotrain_home(tmp_path, monkeypatch):
    """Each node-pool test: its own state dir; no public-address probe unless it sets one."""
    home = tmp_path / "home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    monkeypatch.setenv("GEOTRAIN_PUBLIC_IP_URLS", "")
    return home
