"""Reading a directory tree someone else can write to (a workspace's run directory) without
following a link planted in it: by file descriptor, each directory opened with O_NOFOLLOW
relative to the one above it, so nothing can be swapped for a link between a check and a use
(no path is re-resolved). Used by workspace export and restore (core.backends.export)."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

CHUNK = 1 << 20
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)


def plain_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def open_dir(path: Path, anchor: Path | None = None) -> int:
    """A descriptor of directory `path`, no link followed in `anchor` (the run directory,
    which the app made) or any component below it; without an anchor, not in the last one."""
    path = Path(path)
    try:
        rel = path.relative_to(anchor) if anchor is not None else None
    except ValueError:
        rel = None
    if rel is None:
        return os.open(path, DIR_FLAGS)
    fd = os.open(anchor, DIR_FLAGS)
    try:
        for part in rel.parts:
            inner = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class FileAt:
    """A regular file seen in a directory held open: `name` in `dir_fd` (valid while walking)."""

    dir_fd: int
    name: str
    path: Path

    def size(self) -> int:
        return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False).st_size


def walk_files(root: Path, skipped: list[str], prefix: str = "",
               anchor: Path | None = None) -> Iterable[tuple[str, FileAt]]:
    """(relative name, file) of every regular file under `root`; links and odd files skipped."""
    try:
        fd = open_dir(root, anchor)
    except OSError:
        if os.path.lexists(root):
            skipped.append(prefix or Path(root).name)
        return
    try:
        yield from _walk_fd(fd, Path(root), skipped, prefix)
    finally:
        os.close(fd)


def _walk_fd(fd: int, path: Path, skipped: list[str], prefix: str) -> Iterable[tuple[str, FileAt]]:
    with os.scandir(fd) as entries:
        listed = sorted(entries, key=lambda e: e.name)
    for entry in listed:
        name = f"{prefix}{entry.name}"
        if entry.is_symlink():
            skipped.append(name)
        elif entry.is_dir(follow_symlinks=False):
            try:
                inner = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                skipped.append(name)
                continue
            try:
                yield from _walk_fd(inner, path / entry.name, skipped, name + "/")
            finally:
                os.close(inner)
        elif entry.is_file(follow_symlinks=False):
            yield name, FileAt(fd, entry.name, path / entry.name)
        else:
            skipped.append(name)


def copy_plain_file(src: Path | FileAt, dst: Path, anchor: Path | None = None) -> tuple[int, str] | None:
    """Copy a regular file opened without following a link; (bytes, sha256), or None.
    A path is opened through its directory (see open_dir, `anchor`)."""
    try:
        if isinstance(src, FileAt):
            fd = os.open(src.name, FILE_FLAGS, dir_fd=src.dir_fd)
        else:
            parent = open_dir(Path(src).parent, anchor)
            try:
                fd = os.open(Path(src).name, FILE_FLAGS, dir_fd=parent)
            finally:
                os.close(parent)
    except OSError:
        return None
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(dst, "xb") as out:
            for block in iter(lambda: fh.read(CHUNK), b""):
                out.write(block)
                digest.update(block)
                size += len(block)
    return size, digest.hexdigest()
