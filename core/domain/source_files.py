"""The files geotrain reads from a source tree it ships (the recipes package to pods, a
custom-training --workdir): plain files with the given suffixes, sorted, never through a link,
never above the root, dotfiles, dot folders and caches left out, each file and the total bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

from core.domain.limits import DELIVERY_FILE_BYTES, DELIVERY_TOTAL_BYTES
from core.domain.terminal_text import printable
from core.errors import InvalidInput


def bounded_files(root: Path, suffixes: tuple[str, ...], refuse_file: Callable[[Path, int], Exception],
                  refuse_total: Callable[[], Exception]) -> list[Path]:
    """The files to ship under `root`; raises refuse_file(path, size) for a file over DELIVERY_FILE_BYTES,
    refuse_total() once they add up to over DELIVERY_TOTAL_BYTES."""
    found, total = [], 0
    for directory, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__"))
                         and not os.path.islink(os.path.join(directory, d)))
        for name in sorted(files):
            full = Path(directory, name)
            info = full.lstat()
            if name.startswith(".") or not name.endswith(suffixes) or not stat.S_ISREG(info.st_mode):
                continue  # dotfiles (often credentials), symlinks (lstat), anything not a plain file stay home
            if info.st_size > DELIVERY_FILE_BYTES:
                raise refuse_file(full, info.st_size)
            total += info.st_size
            if total > DELIVERY_TOTAL_BYTES:
                raise refuse_total()
            found.append(full)
    return found


def read_shipped(full: Path, hint: str) -> str:
    """A file bounded_files listed, as UTF-8 text (UnicodeDecodeError for other bytes): opened without
    following a link and read to at most DELIVERY_FILE_BYTES, so a file swapped for a link, a pipe or
    a larger file after the listing is refused in one line, not read through."""
    changed = InvalidInput(f"{printable(str(full))} changed while geotrain read it (now a link, not a plain "
                           f"file, or over {DELIVERY_FILE_BYTES >> 10} KiB)", hint)
    try:
        fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        raise changed from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise changed
        data = fh.read(DELIVERY_FILE_BYTES + 1)
    if len(data) > DELIVERY_FILE_BYTES:
        raise changed
    return data.decode("utf-8")
