"""The training config as typed pydantic models: one definition of a valid config.

Torch-free on purpose: core and the app import this package (the one recipes module
they may import) to check a config in-process, show a field's documentation beside
the editor's cursor, and export a JSON Schema for editors; `recipes.config` loads
YAML against it for the training run.
"""

from recipes.schema.check import ConfigError, check, validate
from recipes.schema.help import FieldHelp, bounds, describe, field_help, json_schema
from recipes.schema.models import (
    CheckpointConfig,
    DataConfig,
    DemoConfig,
    DilocoConfig,
    DistConfig,
    HF_REPO_ID,
    LoggingConfig,
    OptimConfig,
    TrainConfig,
)

__all__ = [
    "CheckpointConfig", "ConfigError", "DataConfig", "DemoConfig", "DilocoConfig", "DistConfig",
    "FieldHelp", "HF_REPO_ID", "LoggingConfig", "bounds", "describe", "OptimConfig", "TrainConfig", "check", "field_help", "json_schema",
    "validate",
]
