"""Checking a detailed config typed by a person (the app's editor): every problem at
once, each with its field path and the line of the YAML text it sits on."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from core.domain import recipe_catalog
from core.errors import FieldError


@dataclass
class ConfigProblem:
    path: str  # e.g. "config.optim.lr"; "config" for the whole text
    message: str  # what was expected and what was found, and what to do
    line: int | None = None  # 1-based line in the text, when known


def line_of(text: str, dotted: str) -> int | None:
    """The 1-based line of the key `dotted` ("optim.lr") in YAML `text`, or the line of
    its deepest existing parent; None when the text does not parse."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in [p for p in dotted.split(".") if p]:
        if not isinstance(node, yaml.MappingNode):
            break
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                line, node = key.start_mark.line + 1, value
                break
        else:
            break
    return line


def _problem(error: FieldError, text: str) -> ConfigProblem:
    path = error.path
    inner = path[len("config."):] if path.startswith("config.") else ""
    said = f"expected {error.expected}, found {error.found}"
    if error.hint and error.hint not in said:  # the recipe checker's own words, when it has more
        said = error.hint if error.expected in error.hint else f"{said} — {error.hint}"
    return ConfigProblem(path, said, line_of(text, inner) if inner else None)


def check_config_text(text: str) -> list[ConfigProblem]:
    """Parse and check a detailed config; an empty list means it is valid."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "not valid YAML"
        return [ConfigProblem("config", f"malformed YAML: {problem} — fix the syntax",
                              mark.line + 1 if mark else None)]
    if not isinstance(data, dict):
        return [ConfigProblem("config", f"expected a YAML mapping, found {type(data).__name__}", 1)]
    return [_problem(error, text) for error in recipe_catalog.config_errors(data)]
