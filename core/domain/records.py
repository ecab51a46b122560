"""The domain: Node, Cluster, Workspace and the WorkspaceSpec (checked by core.domain.spec_schema).

Plain dataclasses: no pydantic, no YAML, so that reading the store starts at once."""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from core.domain.recipe_catalog import TEMPLATES

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


class Status(str, enum.Enum):
    """A workspace's state; the ones between PENDING and RUNNING say why it is not training yet
    (core.domain.run_events derives them from pods and the recipes' event lines)."""

    PENDING = "PENDING"
    PULLING = "PULLING"  # a node is pulling the container image
    INSTALLING_DEPS = "INSTALLING_DEPS"  # a pod's init step installs the recipes' dependencies
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


@dataclass
class WorkspaceSpec:
    """What a user asks for. `config` is the recipe's full detailed config.

    `tokens` holds references into the secret store (e.g. {"wandb": "ws-x/wandb"}),
    never the tokens themselves.

    A plain record, cheap to read back from the store; `from_dict` checks one with the typed
    model in core.domain.spec_schema (pydantic, loaded on first use), which also documents
    each field and gives editors the JSON Schema. Field names and defaults are the same there.
    """

    cluster: str
    model: str
    size: str
    preset: str
    workers: int
    steps: int
    template: str = TEMPLATES[0]
    config: dict[str, Any] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    recovery: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    workdir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any) -> "WorkspaceSpec":
        """A checked spec, or the first problem as one FieldError naming its field."""
        from core.domain.spec_schema import checked_fields

        return cls(**checked_fields(data))

    @staticmethod
    def editor_schema(config_schema: dict[str, Any]) -> dict[str, Any]:
        """JSON Schema of a whole spec file, with the detailed config's schema under `config`."""
        from core.domain.spec_schema import editor_schema

        return editor_schema(config_schema)


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
