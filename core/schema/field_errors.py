"""A pydantic ValidationError -> the one-line FieldError a person reads: the field path,
what was expected, what was found, and what to do. Shared by every core schema."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from core.errors import FieldError
from recipes.schema import bounds, describe

_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def ranked(exc: ValidationError) -> list[dict[str, Any]]:
    """Unknown keys first (by name), then missing ones, then the rest in field order:
    the mistake most likely to explain the others comes first."""
    order = {"extra_forbidden": 0, "missing": 1}
    return sorted(exc.errors(), key=lambda e: (order.get(e["type"], 2),
                                               str(e["loc"]) if e["type"] == "extra_forbidden" else ""))


def expected_of(model: type[BaseModel], name: str, kind: str = "") -> str:
    """The field's type in words; with its limits when the limits are what failed."""
    info = model.model_fields[name]
    return describe(info.annotation) + (bounds(info) if kind in _BOUNDS or kind == "missing" else "")


def first_field_error(exc: ValidationError, model: type[BaseModel], prefix: str = "",
                      expected: Mapping[str, str] | None = None, hints: Mapping[str, str] | None = None,
                      missing_hint: Callable[[str], str] = lambda name: f"set `{name}`") -> FieldError:
    """The first problem of `exc` as a FieldError at `prefix + field`; `expected` and
    `hints` give a field its own words where the type alone says too little."""
    error = ranked(exc)[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    path = prefix + name
    if error["type"] == "extra_forbidden":
        return FieldError(path, f"one of {', '.join(model.model_fields)}", "an unknown field",
                          "remove or rename the field")
    said = (expected or {}).get(name) or expected_of(model, name, error["type"])
    if error["type"] == "missing":
        return FieldError(path, said, None, missing_hint(name))
    found = error.get("input")
    if len(error["loc"]) > 1:  # inside a mapping or list field: pydantic's own words for the item
        path = prefix + ".".join(str(part) for part in error["loc"])
        said = error["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
    return FieldError(path, said, found, (hints or {}).get(name, ""))
