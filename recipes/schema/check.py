"""Plain data -> a TrainConfig, or every problem at once, each with its dotted path,
what was expected, what was found and a message that says what to do."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from recipes.catalog import MODEL_DATA, MODEL_SIZES
from recipes.schema.help import bounds, describe, field_at
from recipes.schema.models import TrainConfig


class ConfigError(Exception):
    """A config that cannot run; `errors` holds one dict per problem."""

    def __init__(self, errors: list[dict]) -> None:
        super().__init__("; ".join(f"{e['path']}: {e['message']}" for e in errors))
        self.errors = errors


def _issue(path: str, expected: str, found: Any, message: str) -> dict:
    return {"path": path, "expected": expected, "found": repr(found), "message": message}


_SIGNS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}


def _from_pydantic(error: dict) -> dict:
    """One pydantic error in the words of this project."""
    loc = [str(p) for p in error["loc"] if not isinstance(p, int)]  # list items: the list's path
    path = ".".join(loc) or "(root)"
    kind, value = error["type"], error.get("input")
    info = field_at(path) if loc else None
    expected = describe(info.annotation) if info else "a mapping"
    if kind == "extra_forbidden":
        parent = field_at(".".join(loc[:-1])) if len(loc) > 1 else None
        model = parent.annotation if parent else TrainConfig
        known = ", ".join(sorted(model.model_fields))
        return _issue(path, "a known key", loc[-1], f"unknown key {loc[-1]!r}; known keys here: {known}")
    if kind == "missing":
        return _issue(path, expected, None, f"missing required key {loc[-1]!r}")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        items = [p for p in error["loc"] if isinstance(p, int)]
        if items:  # a list item's own limit (optim.betas[0] < 1), from the error's context
            ctx = error.get("ctx") or {}
            limit = " and ".join(f"{sign} {ctx[key]}" for key, sign in _SIGNS.items() if key in ctx)
            where = path + "".join(f"[{i}]" for i in items)
            return _issue(path, f"{expected}{bounds(info) if info else ''}, each {limit}", value,
                          f"{where} must be {limit}, found {value!r}")
        limit = bounds(info).strip() if info else ""
        return _issue(path, expected + bounds(info), value, f"{path} must be {limit}, found {value!r}")
    if kind == "string_pattern_mismatch":  # the one pattern: an HF Hub repo id
        return _issue(path, "an HF Hub repo id", value, f"{path} must be an HF Hub repo id (name or namespace/name: "
                                                        f"letters, digits, '.', '_', '-'), found {value!r}")
    if kind in ("too_short", "too_long"):
        size = bounds(info).strip().removeprefix("of ")
        return _issue(path, expected + bounds(info), value, f"{path} needs {size}, found {value!r}")
    if kind in ("model_type", "dict_type") and not loc:
        return _issue(path, "a mapping", value, f"expected a mapping of keys, found {value!r}")
    return _issue(path, expected, value, f"expected {expected}, found {value!r}")


def _across_fields(cfg: TrainConfig) -> list[dict]:
    """What one field cannot know alone: the size and data a model has."""
    if cfg.size not in MODEL_SIZES[cfg.model]:
        sizes = ", ".join(MODEL_SIZES[cfg.model])
        return [_issue("size", "one of " + sizes, cfg.size,
                       f"{cfg.model} has no size {cfg.size!r}; choose one of {sizes}")]
    if cfg.data.source not in MODEL_DATA[cfg.model]:
        ok = ", ".join(MODEL_DATA[cfg.model])
        return [_issue("data.source", "one of " + ok, cfg.data.source,
                       f"{cfg.model} cannot train on {cfg.data.source!r}; use {ok}")]
    return []


def check(data: Any) -> tuple[TrainConfig | None, list[dict]]:
    """The config and no problems, or None and every problem found (one per path)."""
    try:
        cfg = TrainConfig.model_validate(data)
    except ValidationError as exc:
        issues: dict[str, dict] = {}
        for error in exc.errors():
            issue = _from_pydantic(error)
            issues.setdefault(issue["path"], issue)
        return None, list(issues.values())
    problems = _across_fields(cfg)
    return (None if problems else cfg), problems


def validate(data: Any) -> TrainConfig:
    """A checked TrainConfig, or ConfigError listing every problem."""
    cfg, problems = check(data)
    if problems:
        raise ConfigError(problems)
    return cfg
