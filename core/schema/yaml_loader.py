"""The one way core reads YAML: recipes.schema.yaml_limits (bounded size, nesting and
alias expansion), with a refusal turned into one InvalidInput line naming the source and line."""

from __future__ import annotations

from typing import Any

import yaml

from core.errors import InvalidInput
from recipes.schema import yaml_limits

HINT = "fix the YAML and try again"


class MalformedYaml(InvalidInput):
    """YAML geotrain refuses; `line` (1-based, when known) lets the editor point at it."""

    def __init__(self, message: str, line: int | None, problem: str) -> None:
        super().__init__(message, HINT)
        self.line, self.problem = line, problem


def _refused(source: str, exc: yaml_limits.YamlRefused) -> MalformedYaml:
    where = f"{source} line {exc.line}" if exc.line else source
    said = f"malformed YAML: {exc.problem}" if exc.malformed else f"YAML {exc.problem}"
    if exc.line is None and not exc.malformed:
        said = exc.problem if "digits" in exc.problem else said
    return MalformedYaml(f"{where}: {said}", exc.line, exc.problem)


def load_yaml(text: str, source: str, loader: type = yaml.SafeLoader) -> Any:
    """Parse `text` (named `source` in errors) with `loader` (a SafeLoader subclass) inside the limits."""
    try:
        return yaml_limits.load(text, loader)
    except yaml_limits.YamlRefused as exc:
        raise _refused(source, exc) from None


def key_lines(text: str) -> yaml.Node | None:
    """The node tree of `text` for key -> line lookups (None when it is refused)."""
    try:
        return yaml_limits.compose(text)
    except yaml_limits.YamlRefused:
        return None
