"""Messages that carry results from thread workers back to widgets and screens.

Workers never touch widgets: they post one of these, and the handler (on the UI
thread) updates the screen. High-rate messages merge duplicates with `can_replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message


@dataclass
class LogBatch(Message):
    """Log lines read by a reader thread: (worker, text) pairs, in arrival order."""

    lines: list[tuple[str, str]]
    ended: bool = False


@dataclass
class WorkspacesLoaded(Message):
    """A fresh list of workspaces (core.models.Workspace) from a status poll."""

    workspaces: list[Any]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, WorkspacesLoaded)


@dataclass
class WorkspaceStatus(Message):
    """One poll of a workspace: its state (WorkspaceState) and metrics rows so far."""

    workspace: Any
    state: Any
    metrics: list[dict] = field(default_factory=list)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, WorkspaceStatus)


@dataclass
class WorkspaceDeployed(Message):
    workspace: Any


@dataclass
class WorkspaceDeleted(Message):
    workspace_id: str


@dataclass
class NodesLoaded(Message):
    nodes: list[Any]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, NodesLoaded)


@dataclass
class PlanAdvice(Message):
    """The WAN planner's one-line advice for the deploy form's current choices."""

    text: str


@dataclass
class DeployChoices(Message):
    """What the deploy form offers: cluster names, model -> sizes, preset names."""

    clusters: list[str]
    models: dict[str, list[str]]
    presets: list[str]


@dataclass
class FormProblem(Message):
    """A user's input was refused by core: shown inline, under the form."""

    text: str


@dataclass
class DetailedConfig(Message):
    """The full detailed config (YAML) of what the form would deploy now."""

    text: str


@dataclass
class ConfigChecked(Message):
    """The editor's text was checked: core.config_check.ConfigProblem list (empty: valid)."""

    text: str
    problems: list[Any]


@dataclass
class NodesImported(Message):
    nodes: list[Any]


@dataclass
class NodeProgress(Message):
    """A cluster_builder.NodeEvent from the wizard's runner threads."""

    event: Any


@dataclass
class BuildFinished(Message):
    """The preflight or the deploy ended: a cluster_builder.BuildOutcome."""

    stage: str
    outcome: Any
