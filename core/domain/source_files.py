"""The files geotrain reads from a source tree it ships (the recipes package to pods, a
custom-training --workdir): plain files with the given suffixes, sorted, never through a link,
never above the root, dotfiles, dot folders and caches left out, each file and the total bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

from core.domain.limits import DELIVERY_FILE_BYTES, DELIVERY_TOTAL_BYTES


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
