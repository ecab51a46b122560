"""Files of the dataset cache a node shares between workspaces (recipes.data.c4 writes it),
opened so that a link another workspace planted there is never followed: a write through
one would land wherever it points, in this workspace's checkpoints for one.

The cache directory is opened with O_NOFOLLOW (each part below `out_dir`, or the last part of
an absolute `data.cache_dir`, whose parent is the node's dataset mount), and every file in it
relative to that descriptor. A temporary file gets a random name and is created exclusively
(O_CREAT|O_EXCL); a finished file is renamed into place, which replaces a link found there
instead of writing through it. A link where the cache directory should be is refused.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # a planted FIFO does not hang the open


class CacheRefused(ValueError):
    """The shared cache holds a link (or something else) where geotrain needs a plain file or directory."""


def _refused(path: Path, what: str) -> CacheRefused:
    return CacheRefused(f"{path} is a symbolic link or not a {what}; the dataset cache follows no link "
                        "(another workspace may have planted it): remove it, or set data.cache_dir elsewhere")


def open_dir(out_dir: Path, cache_dir: str) -> int:
    """A descriptor of the cache directory `out_dir/cache_dir`, made if missing, no link followed in it."""
    path = Path(out_dir) / cache_dir
    anchor = path.parent if Path(cache_dir).is_absolute() else Path(out_dir)
    anchor.mkdir(parents=True, exist_ok=True)  # the workspace's own out_dir, or the node's mount
    fd = os.open(anchor, DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        for part in path.relative_to(anchor).parts:
            try:
                os.mkdir(part, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                inner = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refused(path, "directory") from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_plain_file(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def new_temp(dir_fd: int, name: str) -> tuple[int, str]:
    """(descriptor, name) of a new temporary file beside `name`, which no one else can have made."""
    temp = f".{name}.tmp-{secrets.token_hex(8)}"
    return os.open(temp, NEW_FILE_FLAGS, 0o666, dir_fd=dir_fd), temp


def commit(dir_fd: int, temp: str, name: str) -> None:
    """Rename a finished temporary file onto `name` (a link there is replaced, not followed)."""
    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def discard(dir_fd: int, temp: str) -> None:
    try:
        os.unlink(temp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def write_file(dir_fd: int, name: str, data: bytes) -> None:
    """Write `name` whole: a temporary file, then a rename."""
    fd, temp = new_temp(dir_fd, name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        commit(dir_fd, temp, name)
    except BaseException:
        discard(dir_fd, temp)
        raise


def open_file(path: Path):
    """A cached file opened for reading (binary), refused when it is a link or not a regular file."""
    try:
        folder = os.open(path.parent, DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refused(path.parent, "directory") from None
        raise
    try:
        fd = os.open(path.name, READ_FLAGS, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(path, "regular file") from None
        raise
    finally:
        os.close(folder)
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise _refused(path, "regular file")
    os.set_blocking(fd, True)
    return fh
