"""Reading a file a user named: at most MAX_USER_FILE bytes, every failure one clear InvalidInput."""

from __future__ import annotations

from pathlib import Path

from core.errors import InvalidInput

# Specs, configs, node lists, kubeconfigs, matrices and ~/.ssh/config are kilobytes; YAML past
# 4 Mi characters is refused anyway (recipes/schema/yaml_limits.py), and UTF-8 takes at most 4
# bytes a character. Reading stops here, so /dev/zero or a huge file is one line, not a hang.
MAX_USER_FILE = 16 * 1024 * 1024


def read_user_file(path: str | Path, what: str, hint: str) -> str:
    """The text of `path`; `what` names it in the error (e.g. "--config FILE")."""
    file = Path(path).expanduser()
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_USER_FILE + 1)
    except IsADirectoryError:
        raise InvalidInput(f"{what} {file} is a directory, not a file", hint) from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {what} {file}: {exc.strerror}", hint) from None
    if len(data) > MAX_USER_FILE:
        raise InvalidInput(f"{what} {file} is larger than {MAX_USER_FILE >> 20} MiB, more than geotrain reads",
                           hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{what} {file} is not UTF-8 text", hint) from None
