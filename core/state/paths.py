"""Where geotrain keeps its state: the platformdirs data dir, or $GEOTRAIN_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from core.errors import GeotrainError


def home() -> Path:
    """The data directory; created on first use with owner-only permissions."""
    override = os.environ.get("GEOTRAIN_HOME")
    path = Path(override).expanduser() if override else Path(platformdirs.user_data_dir("geotrain"))
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except (FileExistsError, NotADirectoryError):
        raise GeotrainError(f"the data directory {path} is a file, not a directory",
                            "point GEOTRAIN_HOME at a directory") from None
    except PermissionError:
        raise GeotrainError(f"cannot create the data directory {path}: permission denied",
                            "point GEOTRAIN_HOME at a directory you can write") from None
    return path


def database_path() -> Path:
    return home() / "state.sqlite3"


def secrets_path() -> Path:
    return home() / "secrets.json"


def workspaces_dir() -> Path:
    path = home() / "workspaces"
    path.mkdir(exist_ok=True, mode=0o700)
    return path
