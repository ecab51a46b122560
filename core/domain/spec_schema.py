"""The typed check of a workspace spec (pydantic): strict types, limits, a docstring per field
for the JSON Schema editors read, and the first problem as one FieldError naming its field.

Loaded by core.domain.records.WorkspaceSpec.from_dict on first use, so that reading the
store (`workspaces list`, the app's first screen) never builds the models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from core.domain.recipe_catalog import TEMPLATES
from core.errors import FieldError

Name = Annotated[str, Strict()]


class WorkspaceSpecSchema(BaseModel):
    """What a user asks for, checked; core.domain.records.WorkspaceSpec holds the result.

    `tokens` holds references into the secret store (e.g. {"wandb": "ws-x/wandb"}),
    never the tokens themselves.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    cluster: Name
    """The cluster it runs on (`geotrain clusters list`)."""
    model: Name
    """Model name from the recipe catalog."""
    size: Name
    """Size name of that model."""
    preset: Name
    """Gradient-compression preset (none, low, medium, high, ultra)."""
    workers: Annotated[int, Strict()] = Field(ge=1)
    """Training processes (one per GPU, or per CPU slot on `local`)."""
    steps: Annotated[int, Strict()] = Field(ge=1)
    """Inner optimizer steps per worker."""
    template: Literal[TEMPLATES] = "distributed-training"  # type: ignore[valid-type]
    """The workspace template."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The detailed (training) config; see `geotrain workspaces schema`."""
    tokens: dict[str, Name] = Field(default_factory=dict)
    """Token references into the secret store, never the tokens."""
    image: Optional[Name] = None
    """Container image for Kubernetes clusters; null: the release's recipes image."""
    recovery: dict[str, Any] = Field(default_factory=dict)
    """Checkpoint location and automatic recovery (core.domain.recovery.RecoverySettings)."""
    command: list[Name] = Field(default_factory=list, max_length=64)
    """custom-training: the command each worker runs, as argv (never through a shell)."""
    workdir: Optional[Name] = None
    """custom-training: the directory the command runs in (shipped to pods, size-bounded)."""

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        """`image: null` takes the default; a required field set to null counts as missing."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _custom_command_checked(self) -> "WorkspaceSpecSchema":
        from core.domain.custom_training import CUSTOM_TRAINING, check_workdir, parse_command

        if self.template == CUSTOM_TRAINING:
            self.command = parse_command(self.command)
            self.workdir = check_workdir(self.workdir)
        elif self.command or self.workdir:
            raise FieldError("command", "no command", self.command or self.workdir,
                             "command and workdir belong to a custom-training workspace")
        return self

    @model_validator(mode="after")
    def _recovery_checked(self) -> "WorkspaceSpecSchema":
        from core.domain.recovery import RecoverySettings

        if self.recovery:
            self.recovery = RecoverySettings.from_dict(self.recovery).to_dict()
        return self


_HINTS = {"workers": "use --workers 1 or more", "steps": "use --steps 1 or more",
          "recovery": "write e.g. `recovery: {max_recoveries: 3}`", "config": "the detailed config is a mapping"}


def checked_fields(data: Any) -> dict[str, Any]:
    """A spec's fields checked and with their defaults, or the first problem as one FieldError."""
    from core.schema.field_errors import first_field_error

    if not isinstance(data, dict):
        raise FieldError("spec", "a mapping of fields", type(data).__name__,
                         "a workspace spec is a YAML mapping such as `model: gpt-neo`")
    try:
        return WorkspaceSpecSchema.model_validate(data).model_dump()
    except ValidationError as exc:
        raise first_field_error(exc, WorkspaceSpecSchema, hints=_HINTS,
                                missing_hint=lambda name: f"set `{name}` in the spec") from None


def editor_schema(config_schema: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema of a whole spec file, with the detailed config's schema under `config`."""
    schema = WorkspaceSpecSchema.model_json_schema()
    defs = {**config_schema.get("$defs", {}), **schema.pop("$defs", {})}
    inner = {k: v for k, v in config_schema.items() if k not in ("$defs", "$schema")}
    described = schema["properties"]["config"].get("description", "")
    schema["properties"]["config"] = {**inner, "description": described}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "$defs": defs}
