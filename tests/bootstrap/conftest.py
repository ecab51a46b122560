"""Fixtures of the wizard suites."""

import pytest


@pytest.fixture
def geotrain_home(tmp_path, monkeypatch):
    """An empty state directory (database, secrets, node logs) for one test."""
    path = tmp_path / "geotrain-home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(path))
    return path
