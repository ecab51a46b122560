"""Rows of a run's metrics.jsonl as the app and the CLI use them. The recipes write the file,
or it comes from an export someone handed over (`deploy --resume-from`): a row whose numbers
are not numbers (a string loss, NaN, 1e999, a 400-digit int) is left out before it reaches the
state database or a chart, where it would break every later `workspaces list`."""

from __future__ import annotations

from typing import Iterable

NUMBERS = ("step", "loss", "eval_loss", "bytes_sent")  # what is stored or drawn
LIMIT = 10 ** 18  # SQLite's INTEGER holds up to 2**63; no loss, step or byte count comes near


def finite(value: object) -> bool:
    """An int or float (not a bool), finite and within LIMIT (False for NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and -LIMIT <= value <= LIMIT


def usable(rows: Iterable[object]) -> list[dict]:
    """The rows that are objects whose NUMBERS, where given, are finite numbers."""
    return [row for row in rows if isinstance(row, dict)
            and all(finite(row[key]) for key in NUMBERS if row.get(key) is not None)]
