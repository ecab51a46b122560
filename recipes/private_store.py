"""The store a local workspace's workers meet in: a torch FileStore in the run's private
directory, never a TCPStore.

torch's TCPStore listens on every interface whatever host it is given, lets any client
list and write its keys, and torchrun's c10d rendezvous unpickles what it reads there: on
a LAN or a shared GPU box that is code execution as the user (issue 38). A file in a
directory only its owner can enter is reachable by nobody else, and nothing in it is
unpickled by geotrain (FileStore keeps raw bytes; gloo reads addresses from it).

The supervisor creates the directory (mode 0700 at creation); each worker checks it again
before opening, so a directory or file that someone else made, or a link planted in its
place, is refused rather than followed.
"""

from __future__ import annotations

import os
import stat
from datetime import timedelta
from pathlib import Path

GROUP_STORE_ENV = "GEOTRAIN_GROUP_STORE"  # a fixed torch.distributed group (DDP, hierarchical)
ELASTIC_STORE_ENV = "GEOTRAIN_ELASTIC_STORE"  # the elastic DiLoCo pool (recipes.elastic)


class StoreRefused(RuntimeError):
    pass


def check_private(path: str | os.PathLike) -> Path:
    """`path` if its directory is ours, 0700 and no link, and the file (if any) a plain file of ours."""
    path = Path(path)
    if not path.is_absolute():
        raise StoreRefused(f"the store path {str(path)!r} is not absolute")
    me = os.geteuid()
    parent = os.lstat(path.parent)
    if not stat.S_ISDIR(parent.st_mode) or parent.st_uid != me or parent.st_mode & 0o077:
        raise StoreRefused(f"the store directory {path.parent} is not a private directory of this user "
                           f"(mode {stat.filemode(parent.st_mode)}): delete the workspace and deploy it again")
    try:
        own = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISREG(own.st_mode) or own.st_uid != me:
        raise StoreRefused(f"the store file {path} is not a plain file of this user: "
                           "delete the workspace and deploy it again")
    return path


def open_file_store(path: str | os.PathLike, timeout: timedelta | None = None):
    """A FileStore on `path` after check_private (any number of processes may share it)."""
    import torch.distributed as dist

    store = dist.FileStore(str(check_private(path)), -1)
    if timeout is not None:
        store.set_timeout(timeout)
    return store
