"""What the recipes offer, read as data: models and sizes from `recipes/configs/`,
presets from `recipes/presets.yaml`. Configs are checked by core.schema.training_config
against `recipes.schema`, the one recipes module core may import.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from core.errors import InvalidInput

# what a workspace can run: the recipes' distributed training, or the user's own command (core.domain.custom_training)
TEMPLATES = ("distributed-training", "custom-training")


def package_root() -> Path:
    """The directory that holds the core/, tui/, recipes/ and themes/ packages."""
    return Path(__file__).resolve().parents[2]


def recipes_dir() -> Path:
    return package_root() / "recipes"


def configs_dir() -> Path:
    return recipes_dir() / "configs"


def _read_yaml(path: Path) -> Any:
    """A catalog file; the YAML reader loads with the first one read, not with the catalog."""
    from core.schema.yaml_loader import load_yaml

    return load_yaml(path.read_text(), str(path))


@functools.lru_cache(maxsize=1)
def models() -> dict[str, list[str]]:
    """Model name -> its sizes, smallest first as listed by file name."""
    found: dict[str, list[str]] = {}
    for path in sorted(configs_dir().glob("*/*.yaml")):
        found.setdefault(path.parent.name, []).append(path.stem)
    for sizes in found.values():
        sizes.sort(key=lambda s: (s != "tiny", s))
    return found


@functools.lru_cache(maxsize=1)
def param_counts() -> dict[str, dict[str, int]]:
    """Model -> size -> trainable parameters, from recipes/params.yaml (counted once by a tool)."""
    path = recipes_dir() / "params.yaml"
    return _read_yaml(path) or {}


@functools.lru_cache(maxsize=1)
def presets() -> dict[str, dict[str, Any]]:
    """Preset name -> its settings (algorithm, inner_steps, bits, description)."""
    path = recipes_dir() / "presets.yaml"
    data = _read_yaml(path) or {}
    return data.get("presets", data)


def check_choice(kind: str, value: str, known: list[str], flag: str) -> None:
    if value not in known:
        raise InvalidInput(f"unknown {kind} {value!r}",
                           f"use {flag} with one of: {', '.join(known)}")


def default_config(model: str, size: str) -> dict[str, Any]:
    check_choice("model", model, list(models()), "--model")
    check_choice(f"size for {model}", size, models()[model], "--size")
    path = configs_dir() / model / f"{size}.yaml"
    return _read_yaml(path)


def recipe_env() -> dict[str, str]:
    """Environment in which `python -m recipes.…` finds the shipped recipes package."""
    env = dict(os.environ)
    root = str(package_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def set_path(config: dict[str, Any], dotted: str, raw: str) -> None:
    """Apply one `--set key=value`; the key must be a key of the training schema (it may be
    missing from the config file: the sections on the way are created). Refused: nothing changes."""
    from core.schema.training_config import config_keys
    from core.schema.yaml_loader import load_yaml

    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth])
        keys = config_keys(where)
        if keys is None or part not in keys:
            hint = (f"{where} is a value, not a section" if keys is None else
                    f"keys under {where or 'the config root'}: {', '.join(sorted(keys))}")
            raise InvalidInput(f"--set: no config key {dotted!r}", hint)
    value = load_yaml(raw, f"--set {dotted}") if raw != "" else ""
    node: Any = config
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value
