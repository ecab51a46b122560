"""The `custom-training` workspace: the user's own command (a training script that uses
geotrain_loop, or plain torch) run under geotrain's supervisor, in a working directory they name.

The command is argv (shlex.split of what they typed; never a shell), checked here. The working
directory is read only as far as it is named: its plain files with source-like suffixes, no links,
nothing above it, within the same bounds as the recipes geotrain ships to pods
(core.domain.limits: DELIVERY_FILE_BYTES per file, DELIVERY_TOTAL_BYTES in all).
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from core.domain.limits import DELIVERY_FILE_BYTES as MAX_FILE_BYTES, DELIVERY_TOTAL_BYTES as MAX_TOTAL_BYTES
from core.domain.source_files import bounded_files
from core.domain.terminal_text import printable
from core.errors import InvalidInput

CUSTOM_TRAINING = "custom-training"
CUSTOM_MODEL, CUSTOM_SIZE = "custom", "own"  # what the spec's catalog fields hold for a custom workspace
MAX_ARGS = 64
MAX_ARG_CHARS = 1024
MAX_COMMAND_CHARS = 4096
# What a working directory ships (to pods) and counts toward its bound: source and small configs; data and
# weights stay home (read them from a dataset, a volume or the Hub)
WORKDIR_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".toml", ".txt", ".md", ".cfg", ".ini", ".sh", ".lock")
# Environment a custom command reads (geotrain_loop reads the first; the others say what was deployed)
OUT_DIR_ENV, PRESET_ENV, STEPS_ENV = "GEOTRAIN_OUT_DIR", "GEOTRAIN_PRESET", "GEOTRAIN_STEPS"


def parse_command(text: str | list | None) -> list[str]:
    """The command as argv: shlex words, each printable text within the bounds; refused in one line."""
    hint = 'write e.g. --command "python train.py --epochs 1"'
    if isinstance(text, list) and text:
        words = text
    elif isinstance(text, str) and text.strip():
        if len(text) > MAX_COMMAND_CHARS:
            raise InvalidInput(f"--command is {len(text)} characters, over {MAX_COMMAND_CHARS}", hint)
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise InvalidInput(f"--command cannot be split into words: {exc}", hint) from None
    else:
        raise InvalidInput("a custom-training workspace needs --command", hint)
    if not words or len(words) > MAX_ARGS:
        raise InvalidInput(f"--command has {len(words)} words; 1 to {MAX_ARGS} are allowed", hint)
    for word in words:
        if not isinstance(word, str) or not word or len(word) > MAX_ARG_CHARS or printable(word) != word \
                or "\x00" in word:
            shown = printable(str(word))[:40]
            raise InvalidInput(f"--command word {shown!r} is not printable text of 1-{MAX_ARG_CHARS} characters",
                               "leave control characters and NUL out of the command")
    return list(words)


def check_workdir(path: str | None) -> str | None:
    """The working directory as an absolute path, checked: a directory (not a link), whose shippable
    files are within the bounds; None when none was named."""
    if path is None:
        return None
    if not isinstance(path, str) or not path or "\x00" in path or printable(path) != path:
        raise InvalidInput("--workdir is not a printable path", "name a directory, e.g. --workdir .")
    folder = Path(path).expanduser()
    try:
        info = os.lstat(folder)
    except OSError:
        raise InvalidInput(f"--workdir {printable(path)} does not exist", "name a directory that holds your "
                           "training script") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise InvalidInput(f"--workdir {printable(path)} is not a directory (links are not followed)",
                           "name the directory itself")
    workdir_files(folder.resolve())  # the bounds, now rather than at the first pod
    return str(folder.resolve())


def workdir_files(root: Path) -> list[tuple[str, Path]]:
    """(path relative to root, file) of what the working directory ships, sorted; refused beyond the bounds."""
    hint = "keep data and weights out of --workdir (read them from a dataset or the Hub), or bake them into --image"
    files = bounded_files(root, WORKDIR_SUFFIXES, lambda full, size: InvalidInput(
        f"{printable(str(full))} is {size} bytes, over the {MAX_FILE_BYTES >> 10} KiB geotrain delivers per file", hint),
        lambda: InvalidInput(f"--workdir {printable(str(root))} holds over {MAX_TOTAL_BYTES >> 20} MiB of source",
                             "name a smaller directory, or bake it into --image"))
    return [(full.relative_to(root).as_posix(), full) for full in files]


def local_argv(command: list[str]) -> list[str]:
    """On `local`, `python`/`python3` is the interpreter geotrain runs in (where geotrain_loop is installed)."""
    import sys

    return [sys.executable, *command[1:]] if command[0] in ("python", "python3") else list(command)


def command_env(out_dir: str, preset: str, steps: int) -> dict[str, str]:
    """What the command finds in its environment besides torchrun's (RANK, WORLD_SIZE, LOCAL_RANK)."""
    return {OUT_DIR_ENV: out_dir, PRESET_ENV: preset, STEPS_ENV: str(steps)}
