"""Reading a file a user named: every failure becomes one clear InvalidInput."""

from __future__ import annotations

from pathlib import Path

from core.errors import InvalidInput


def read_user_file(path: str | Path, what: str, hint: str) -> str:
    """The text of `path`; `what` names it in the error (e.g. "--config FILE")."""
    file = Path(path).expanduser()
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{what} {file} is not UTF-8 text", hint) from None
    except IsADirectoryError:
        raise InvalidInput(f"{what} {file} is a directory, not a file", hint) from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {what} {file}: {exc.strerror}", hint) from None
