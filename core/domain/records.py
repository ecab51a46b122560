"""The domain: Node, Cluster, Workspace and the WorkspaceSpec with its validation."""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from core.errors import FieldError, InvalidInput

TEMPLATES = ("distributed-training",)
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


class Status(str, enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
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
    """

    cluster: str
    model: str
    size: str
    preset: str
    workers: int
    steps: int
    template: str = "distributed-training"
    config: dict[str, Any] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    recovery: dict[str, Any] = field(default_factory=dict)
    """Checkpoint location and automatic recovery (core.domain.recovery.RecoverySettings)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, data: Any) -> "WorkspaceSpec":
        return cls(**validate_spec_fields(data))


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


def parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise InvalidInput(f"{source}: malformed YAML{where}: {problem}",
                           "fix the YAML syntax and try again") from None


_FIELDS: dict[str, tuple[type, str]] = {
    "template": (str, "a template name"),
    "cluster": (str, "a cluster name"),
    "model": (str, "a model name"),
    "size": (str, "a size name"),
    "preset": (str, "a gradient-compression preset"),
    "workers": (int, "a whole number of workers ≥ 1"),
    "steps": (int, "a whole number of steps ≥ 1"),
    "config": (dict, "a mapping (the detailed config)"),
    "tokens": (dict, "a mapping of token references"),
    "image": (str, "a container image name"),
    "recovery": (dict, "a mapping of recovery settings"),
}
_REQUIRED = ("cluster", "model", "size", "preset", "workers", "steps")


def validate_spec_fields(data: Any) -> dict[str, Any]:
    """Check shape and types of a spec mapping; raises FieldError with the path."""
    if not isinstance(data, dict):
        raise FieldError("spec", "a mapping of fields", type(data).__name__,
                         "a workspace spec is a YAML mapping such as `model: gpt-neo`")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise FieldError(unknown[0], f"one of {', '.join(_FIELDS)}", "an unknown field",
                         "remove or rename the field")
    for name in _REQUIRED:
        if data.get(name) is None:
            raise FieldError(name, _FIELDS[name][1], None, f"set `{name}` in the spec")
    out: dict[str, Any] = {}
    for name, value in data.items():
        kind, expected = _FIELDS[name]
        if value is None and name not in _REQUIRED:
            continue
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise FieldError(name, expected, value)
        if not isinstance(value, kind):
            raise FieldError(name, expected, value)
        out[name] = value
    for name in ("workers", "steps"):
        if out[name] < 1:
            raise FieldError(name, _FIELDS[name][1], out[name],
                             f"use --{name} 1 or more")
    if "recovery" in out:
        from core.domain.recovery import RecoverySettings

        out["recovery"] = RecoverySettings.from_dict(out["recovery"]).to_dict()
    if out.get("template", TEMPLATES[0]) not in TEMPLATES:
        raise FieldError("template", f"one of {', '.join(TEMPLATES)}", out["template"])
    return out
