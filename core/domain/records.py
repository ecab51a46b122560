"""The domain: Node, Cluster, Workspace and the WorkspaceSpec with its validation."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator

from core.errors import FieldError
from core.schema.field_errors import first_field_error

TEMPLATES = ("distributed-training",)
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


class Status(str, enum.Enum):
    """A workspace's state; the ones between PENDING and RUNNING say why it is not training yet
    (core.domain.run_events derives them from pods and the recipes' event lines)."""

    PENDING = "PENDING"
    PULLING = "PULLING"  # a node is pulling the container image
    PREPARING_DATA = "PREPARING_DATA"  # downloading or tokenising the dataset
    RENDEZVOUS = "RENDEZVOUS"  # started, waiting for the other workers
    RUNNING = "RUNNING"  # training steps flowing
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    DELETED = "DELETED"

    @property
    def terminal(self) -> bool:
        return self in (Status.COMPLETED, Status.FAILED, Status.DELETED)


@dataclass
class Node:
    name: str
    host: str
    username: str
    port: int = 22
    key_path: str | None = None
    jump: str | None = None
    datacenter: str | None = None
    status: str = "AVAILABLE"
    blockers: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    cluster: str | None = None


@dataclass
class Cluster:
    name: str
    kind: str  # "local" | "geotrain" (built by the wizard) | "kubernetes" (registered)
    status: str = "READY"
    config: dict[str, Any] = field(default_factory=dict)
    kubeconfig_path: str | None = None
    nodes: list[str] = field(default_factory=list)


Name = Annotated[str, Strict()]


class WorkspaceSpec(BaseModel):
    """What a user asks for. `config` is the recipe's full detailed config.

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

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        """`image: null` takes the default; a required field set to null counts as missing."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _recovery_checked(self) -> "WorkspaceSpec":
        from core.domain.recovery import RecoverySettings

        if self.recovery:
            self.recovery = RecoverySettings.from_dict(self.recovery).to_dict()
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any) -> "WorkspaceSpec":
        """A checked spec, or the first problem as one FieldError naming its field."""
        if not isinstance(data, dict):
            raise FieldError("spec", "a mapping of fields", type(data).__name__,
                             "a workspace spec is a YAML mapping such as `model: gpt-neo`")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise first_field_error(exc, cls, hints=_HINTS,
                                    missing_hint=lambda name: f"set `{name}` in the spec") from None

    @classmethod
    def editor_schema(cls, config_schema: dict[str, Any]) -> dict[str, Any]:
        """JSON Schema of a whole spec file, with the detailed config's schema under `config`."""
        schema = cls.model_json_schema()
        defs = {**config_schema.get("$defs", {}), **schema.pop("$defs", {})}
        inner = {k: v for k, v in config_schema.items() if k not in ("$defs", "$schema")}
        described = schema["properties"]["config"].get("description", "")
        schema["properties"]["config"] = {**inner, "description": described}
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "$defs": defs}


_HINTS = {"workers": "use --workers 1 or more", "steps": "use --steps 1 or more",
          "recovery": "write e.g. `recovery: {max_recoveries: 3}`", "config": "the detailed config is a mapping"}


@dataclass
class Workspace:
    id: str
    spec: WorkspaceSpec
    status: str
    created_at: float
    updated_at: float
    run_dir: str | None = None
    last_loss: float | None = None

    @property
    def cluster(self) -> str:
        return self.spec.cluster
