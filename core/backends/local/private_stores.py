"""Where a local workspace's workers meet, kept off the network (issue 38).

torch's TCPStore binds every interface whatever host it is given, any client may list and
write its keys, and torchrun's c10d rendezvous unpickles what it reads there: anyone on
the LAN, or any other user of a shared box, could run code as this user. So a local
workspace has no store on any port. Its workers meet in a torch FileStore, one file per
restart attempt, in `<run dir>/stores/`, a directory created 0700 (the mode is set at
creation, never by a chmod after) that no other user can enter. The collectives
themselves (gloo, NCCL's bootstrap) bind the loopback interface only.

Why a file store over the other choices: a private network namespace needs root or
unprivileged user namespaces (off on many distributions); a loopback TCPStore with a
secret does not exist in torch; a FileStore is in torch everywhere and its only
permission check is the file system's, which is the one we already trust for the
workspace's checkpoints and tokens.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import psutil

from core.errors import BackendError

STORES = "stores"
# The env names recipes.private_store reads (recipes are launched, never imported, by core).
GROUP_STORE_ENV = "GEOTRAIN_GROUP_STORE"
ELASTIC_STORE_ENV = "GEOTRAIN_ELASTIC_STORE"


def private_dir(path: Path) -> Path:
    """`path` as a directory only this user can enter: made 0700 if absent; refused if it is
    a link, someone else's, or open to others (never repaired with a chmod)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise BackendError(f"{path} is not a private directory of this user "
                           f"({stat.filemode(info.st_mode)}, uid {info.st_uid})",
                           "delete the workspace and deploy it again")
    return path


def store_file(run_dir: Path, name: str) -> Path:
    """A fresh store file for one attempt (a stale one from an earlier attempt is removed)."""
    path = private_dir(run_dir / STORES) / name
    path.unlink(missing_ok=True)
    return path


def loopback_interface() -> str:
    """The name of the interface that holds 127.0.0.1 (`lo` on Linux, `lo0` on macOS)."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addresses):
            return name
    return "lo"


def loopback_env() -> dict[str, str]:
    """Collectives bind loopback: by default gloo and NCCL bind the address the host name
    resolves to, which on most machines is the LAN's."""
    name = loopback_interface()
    return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}
