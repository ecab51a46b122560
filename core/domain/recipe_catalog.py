"""What the recipes offer, read as data: models and sizes from `recipes/configs/`,
presets from `recipes/presets.yaml`; configs checked by launching `recipes.config`.

core never imports recipes: it reads their data files and runs their checker as a
process, so the recipe's own dataclasses stay the one definition of a valid config.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from core.errors import BackendError, FieldError, InvalidInput


def package_root() -> Path:
    """The directory that holds the core/, tui/, recipes/ and themes/ packages."""
    return Path(__file__).resolve().parents[2]


def recipes_dir() -> Path:
    return package_root() / "recipes"


def configs_dir() -> Path:
    return recipes_dir() / "configs"


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
    return yaml.safe_load((recipes_dir() / "params.yaml").read_text()) or {}


@functools.lru_cache(maxsize=1)
def presets() -> dict[str, dict[str, Any]]:
    """Preset name -> its settings (algorithm, inner_steps, bits, description)."""
    data = yaml.safe_load((recipes_dir() / "presets.yaml").read_text()) or {}
    return data.get("presets", data)


def check_choice(kind: str, value: str, known: list[str], flag: str) -> None:
    if value not in known:
        raise InvalidInput(f"unknown {kind} {value!r}",
                           f"use {flag} with one of: {', '.join(known)}")


def default_config(model: str, size: str) -> dict[str, Any]:
    check_choice("model", model, list(models()), "--model")
    check_choice(f"size for {model}", size, models()[model], "--size")
    return yaml.safe_load((configs_dir() / model / f"{size}.yaml").read_text())


def recipe_env() -> dict[str, str]:
    """Environment in which `python -m recipes.…` finds the shipped recipes package."""
    env = dict(os.environ)
    root = str(package_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def config_errors(config: dict[str, Any]) -> list[FieldError]:
    """Every problem the recipe's own checker finds in `config` (empty when valid)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(config, handle, sort_keys=False)
        name = handle.name
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "recipes.config", "check", name, "--json"],
            capture_output=True, text=True, timeout=60, env=recipe_env(),
            cwd=str(package_root()),
        )
    finally:
        os.unlink(name)
    if proc.returncode == 0:
        return []
    try:
        problems = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise BackendError("the recipe config checker failed",
                           (proc.stderr.strip().splitlines() or ["no output"])[-1]) from None
    return [FieldError("config." + p["path"] if p.get("path") else "config",
                       p.get("expected", "?"), Shown(p.get("found", "?")),
                       f"fix config.{p['path']} in the detailed config, or --set {p['path']}=VALUE"
                       if p.get("path") else "fix the detailed config")
            for p in problems]


class Shown(str):
    """A value the checker already rendered; shown as it is, not quoted again."""

    def __repr__(self) -> str:
        return str(self)


def set_path(config: dict[str, Any], dotted: str, raw: str) -> None:
    """Apply one `--set key=value`; the key must already exist in the config."""
    node: Any = config
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            where = ".".join(parts[:depth]) or "the config root"
            keys = ", ".join(sorted(node)) if isinstance(node, dict) else "none"
            raise InvalidInput(f"--set: no config key {dotted!r}",
                               f"keys under {where}: {keys}")
        if depth == len(parts) - 1:
            node[part] = yaml.safe_load(raw) if raw != "" else ""
        else:
            node = node[part]
