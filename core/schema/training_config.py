"""The detailed (training) config checked in-process against `recipes.schema`, the one
typed definition core, the app and the recipes share: errors with field path and YAML
line, the documentation of the key at the editor's cursor, and the JSON Schema."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from core.errors import FieldError
from core.schema.yaml_loader import MalformedYaml, key_lines, load_yaml
from recipes import schema as recipe_schema


@dataclass
class ConfigProblem:
    path: str  # e.g. "config.optim.lr"; "config" for the whole text
    message: str  # what was expected and what was found, and what to do
    line: int | None = None  # 1-based line in the text, when known


class Shown(str):
    """A value the checker already rendered; shown as it is, not quoted again."""

    def __repr__(self) -> str:
        return str(self)


def _field_error(issue: dict) -> FieldError:
    if issue["path"] == "(root)":
        return FieldError("config", issue["expected"], Shown(issue["found"]), "fix the detailed config")
    path = issue["path"]
    return FieldError(f"config.{path}", issue["expected"], Shown(issue["found"]),
                      f"fix config.{path} in the detailed config, or --set {path}=VALUE")


def config_keys(section: str = "") -> list[str] | None:
    """The keys the training schema allows in `section` ("" = the top level, "optim", ...),
    or None when `section` is not a section of the schema."""
    from pydantic import BaseModel  # loaded with the schema, not with this module

    model: Any = recipe_schema.TrainConfig
    for part in [p for p in section.split(".") if p]:
        info = model.model_fields.get(part)
        model = info.annotation if info is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    return list(model.model_fields)


def config_errors(config: Any) -> list[FieldError]:
    """Every problem in a detailed config (empty when valid), as FieldErrors under `config.`."""
    return [_field_error(issue) for issue in recipe_schema.check(config)[1]]


def line_of(text: str, dotted: str) -> int | None:
    """The 1-based line of the key `dotted` ("optim.lr") in YAML `text`, or the line of
    its deepest existing parent; None when the text does not parse."""
    node = key_lines(text)
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


def _problem(issue: dict, text: str) -> ConfigProblem:
    """The schema's own words for a problem, at the line of its key."""
    if issue["path"] == "(root)":
        return ConfigProblem("config", issue["message"], 1)
    return ConfigProblem("config." + issue["path"], issue["message"], line_of(text, issue["path"]))


def check_config_text(text: str) -> list[ConfigProblem]:
    """Parse and check a detailed config typed in the editor; an empty list means valid."""
    try:
        data = load_yaml(text, "the config")
    except MalformedYaml as exc:
        return [ConfigProblem("config", f"{exc.message.split(': ', 1)[-1]} — fix it here", exc.line)]
    if not isinstance(data, dict):
        return [ConfigProblem("config", f"expected a YAML mapping, found {type(data).__name__}", 1)]
    return [_problem(issue, text) for issue in recipe_schema.check(data)[1]]


_KEY = re.compile(r"(\s*)(?:-\s+)?([A-Za-z_][\w-]*)\s*:(?:\s|$)")


def key_path_at(text: str, row: int) -> str | None:
    """The dotted key path ("optim.lr") the 0-based line `row` belongs to, by indentation,
    so that it works while the text is half typed and does not parse."""
    lines = text.splitlines()
    if not 0 <= row < len(lines) or not lines[row].strip() or lines[row].lstrip().startswith("#"):
        return None
    path: list[str] = []
    here = _KEY.match(lines[row])
    indent = len(lines[row]) - len(lines[row].lstrip())
    if not here and lines[row].lstrip().startswith("-"):
        indent += 1  # a compact list item (`betas:` then `- 0.9` at the same indent) belongs to the key above
    if here:
        path.append(here.group(2))
    for line in reversed(lines[:row]):
        found = _KEY.match(line)
        if found and len(found.group(1)) < indent:
            path.insert(0, found.group(2))
            indent = len(found.group(1))
        if indent == 0:
            break
    return ".".join(path) or None


def field_hint(dotted: str | None) -> str | None:
    """One line for the editor: the field's documentation, type or choices, and default."""
    if not dotted:
        return None
    found = recipe_schema.field_help(dotted)
    if found:
        return found.line()
    parent, _, key = dotted.rpartition(".")
    known = recipe_schema.field_help(parent) if parent else None
    top = ", ".join(recipe_schema.TrainConfig.model_fields)
    keys = known.expected.removeprefix("a mapping: ") if known else top
    return f"{dotted}: {key!r} is not a key here; known keys: {keys}"


def config_json_schema() -> dict[str, Any]:
    """JSON Schema of a detailed config (yaml-language-server validates against it)."""
    return recipe_schema.json_schema()
