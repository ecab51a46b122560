"""The training config as typed pydantic models: one definition of a valid config.

Torch-free on purpose: core and the app import this package (the one recipes module
they may import) to check a config in-process, show a field's documentation beside
the editor's cursor, and export a JSON Schema for editors; `recipes.config` loads
YAML against it for the training run.

The names below load their module on first use: `from recipes.schema import yaml_limits`
(the YAML loader core reads every file with) must not build the pydantic models.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_HOMES = {
    "ConfigError": "check", "check": "check", "validate": "check",
    "FieldHelp": "help", "bounds": "help", "describe": "help", "field_help": "help", "json_schema": "help",
    "CheckpointConfig": "models", "DataConfig": "models", "DemoConfig": "models", "DilocoConfig": "models",
    "DistConfig": "models", "HF_REPO_ID": "models", "LoggingConfig": "models", "OptimConfig": "models",
    "TrainConfig": "models",
}

__all__ = sorted(_HOMES)

if TYPE_CHECKING:
    from recipes.schema.check import ConfigError, check, validate
    from recipes.schema.help import FieldHelp, bounds, describe, field_help, json_schema
    from recipes.schema.models import (CheckpointConfig, DataConfig, DemoConfig, DilocoConfig, DistConfig,
                                       HF_REPO_ID, LoggingConfig, OptimConfig, TrainConfig)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _HOMES[name]
    module = import_module(f"{__name__}.{home}")
    # every name of that module at once: importing `recipes.schema.check` set the attribute
    # `check` to the module, which the function of that name must replace
    globals().update({n: getattr(module, n) for n, h in _HOMES.items() if h == home})
    return globals()[name]
