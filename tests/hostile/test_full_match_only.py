"""Names are checked with full matches: `X_RE.match()` with a `$`-anchored pattern accepts
a trailing newline ("gpu1\\n"), which then reaches configs and shells. Kept out for good."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_validation_regex_is_used_with_match_or_search():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for folder in ("core", "tui") for path in sorted((ROOT / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\b[A-Z_]*_RE\.match\(", line)]
    assert found == []


def test_the_node_name_pattern_refuses_a_trailing_newline():
    from core.domain.records import NAME_RE

    assert NAME_RE.fullmatch("gpu1") and not NAME_RE.fullmatch("gpu1\n")
    assert NAME_RE.match("gpu1\n")  # why: `$` matches before a final newline
