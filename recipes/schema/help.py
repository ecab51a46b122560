"""What a field is, in words: the editor's hint beside the cursor, the `expected` of an
error, and the JSON Schema that editors (yaml-language-server) validate against."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from recipes.schema.models import TrainConfig

_NAMES = {int: "an integer", float: "a float", str: "a string", bool: "true or false"}


def describe(tp: Any) -> str:
    """A type in the words of an error message: "an integer", "one of 'a', 'b'", "a float or null"."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return describe(typing.get_args(tp)[0])
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return describe(inner[0]) + " or null"
    if origin is dict or tp is dict:
        return "a mapping"
    if origin is list:
        return "a list of " + describe(typing.get_args(tp)[0]).removeprefix("a ").removeprefix("an ") + "s"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "a mapping"
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def bounds(info: FieldInfo) -> str:
    """" ≥ 1", " > 0", " of 2 values": the limits a field's metadata sets, in words."""
    words = []
    for item in info.metadata:
        for kind, attr, sign in ((Ge, "ge", "≥"), (Gt, "gt", ">"), (Le, "le", "≤"), (Lt, "lt", "<")):
            if isinstance(item, kind):
                words.append(f" {sign} {getattr(item, attr)}")
    sizes = [m for m in info.metadata if isinstance(m, (MinLen, MaxLen))]
    lengths = {getattr(m, "min_length", None) or getattr(m, "max_length", None) for m in sizes}
    if len(lengths) == 1 and len(sizes) == 2:
        words.append(f" of {lengths.pop()} values")
    return "".join(words)


def _section(tp: Any) -> type[BaseModel] | None:
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def field_at(dotted: str, root: type[BaseModel] = TrainConfig) -> FieldInfo | None:
    """The field a dotted path ("optim.lr") names, or None when there is no such field."""
    model: type[BaseModel] | None = root
    info = None
    for part in dotted.split("."):
        if model is None or part not in model.model_fields:
            return None
        info = model.model_fields[part]
        model = _section(info.annotation)
    return info


@dataclass(frozen=True)
class FieldHelp:
    """One field's documentation, its type and limits, its choices and its default."""

    path: str
    description: str
    expected: str
    default: str

    def line(self) -> str:
        default = f" · default {self.default}" if self.default else ""
        return f"{self.path}: {self.description} · {self.expected}{default}"


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
        return "" if isinstance(value, BaseModel) else repr(value)
    if info.default is PydanticUndefined:
        return "(required)"
    return "null" if info.default is None else repr(info.default)


def field_help(dotted: str, root: type[BaseModel] = TrainConfig) -> FieldHelp | None:
    """The hint the editor shows for the key at its cursor; None for an unknown path."""
    info = field_at(dotted, root)
    if info is None:
        return None
    section = _section(info.annotation)
    expected = (f"a mapping: {', '.join(section.model_fields)}" if section
                else describe(info.annotation) + bounds(info))
    return FieldHelp(dotted, (info.description or "").strip(), expected, _default(info))


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a detailed config, for editors that validate YAML; built
    once per change of the files it comes from (recipes.schema.docs_cache)."""
    from recipes.schema import docs_cache

    inputs = sorted(docs_cache.HERE.glob("*.py")) + [docs_cache.RECIPES / "catalog.py",
                                                      docs_cache.RECIPES / "presets.yaml"]
    return docs_cache.cached("config-schema", inputs, lambda: {
        "$schema": "https://json-schema.org/draft/2020-12/schema", **TrainConfig.model_json_schema()})
