"""Plain-text tables and JSON for the headless commands (no UI libraries)."""

from __future__ import annotations

import json
import sys
from typing import Any, Sequence

from core.domain.terminal_text import printable


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out=None) -> None:
    out = out or sys.stdout
    cells = [[("" if v is None else printable(v)) for v in row] for row in rows]  # facts are servers' words
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    line = "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths))
    print(line.rstrip(), file=out)
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)


def dump_json(data: Any, out=None) -> None:
    json.dump(data, out or sys.stdout, indent=2, default=str)
    print(file=out or sys.stdout)
