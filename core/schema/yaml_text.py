"""The one place core parses YAML a person wrote (specs, detailed configs, the editor).

Every parse goes through `parse_yaml`, so limits (aliases, size, depth) are added here
once; a syntax error becomes one InvalidInput line that names the source and the line.
"""

from __future__ import annotations

from typing import Any

import yaml

from core.errors import InvalidInput


class MalformedYaml(InvalidInput):
    """Text that is not YAML; `line` is 1-based when the parser knows it."""

    def __init__(self, message: str, hint: str, line: int | None, problem: str) -> None:
        super().__init__(message, hint)
        self.line = line
        self.problem = problem


def parse_yaml(text: str, source: str) -> Any:
    """The data in `text`; `source` names it in the error ("--config FILE", "the edited spec")."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise MalformedYaml(f"{source}: malformed YAML{where}: {problem}", "fix the YAML syntax and try again",
                            mark.line + 1 if mark else None, problem) from None


def key_lines(text: str) -> yaml.Node | None:
    """The node tree of text that `parse_yaml` already accepted (for key -> line lookups)."""
    try:
        return yaml.compose(text)
    except yaml.YAMLError:
        return None
