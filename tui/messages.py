"""Messages that carry results from thread workers back to widgets and screens.

Workers never touch widgets: they post one of these, and the handler (on the UI
thread) updates the screen. High-rate messages merge duplicates with `can_replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:  # named in annotations only: the first screen loads none of these modules
    from core.backends.base import WorkspaceState
    from core.schema.training_config import ConfigProblem
    from core.domain.records import Node, Workspace
    from core.bootstrap.progress import ProgressEvent
    from core.requirements.report import Report
    from core.workspaces import DeployRequest
    from tui.cluster_builder import BuildOutcome


@dataclass
class LogBatch(Message):
    """Log lines read by a reader thread: (worker, text) pairs, in arrival order."""

    lines: list[tuple[str, str]]
    ended: bool = False


@dataclass
class WorkspacesLoaded(Message):
    """A fresh list of workspaces from a status poll."""

    workspaces: list[Workspace]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, WorkspacesLoaded)


@dataclass
class WorkspaceStatus(Message):
    """One poll of a workspace: its state, metrics rows so far and each worker's recent
    utilization figures (oldest first)."""

    workspace: Workspace
    state: WorkspaceState
    metrics: list[dict] = field(default_factory=list)
    utilization: dict[str, list[dict]] = field(default_factory=dict)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, WorkspaceStatus)


@dataclass
class ProcessesLoaded(Message):
    """A workspace's worker processes or pods (core.backends.base.WorkerProcess rows)."""

    rows: list[Any]


@dataclass
class WorkspaceDeployed(Message):
    workspace: Workspace


@dataclass
class WorkspaceDeleted(Message):
    workspace_id: str


@dataclass
class NodesLoaded(Message):
    nodes: list[Node]
    checks: dict | None = None  # node -> (cluster, its part of the last clusters check); None: unchanged

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, NodesLoaded)


@dataclass
class CordonDone(Message):
    """A node was cordoned (unschedulable) or uncordoned; `sentence` says so in words."""

    cluster: str
    node: str
    unschedulable: bool
    sentence: str


@dataclass
class PlanAdvice(Message):
    """The WAN planner's advice for the deploy form's choices `key` (cluster, model, size, workers):
    the text shown, the plan for `ctrl+r` (None when there is no estimate) and why there is none."""

    text: str
    plan: Any = None
    key: tuple = ()
    no_plan: str = ""


@dataclass(frozen=True)
class AppliedPlan:
    """What `ctrl+r` applied for the choices `key`: the preset and `--set` items the form deploys with."""

    key: tuple
    preset: str
    sets: tuple[str, ...]
    what: str


@dataclass
class DeployChoices(Message):
    """What the deploy form offers: cluster names, model -> sizes, preset names."""

    clusters: list[str]
    models: dict[str, list[str]]
    presets: list[str]


@dataclass
class RequirementsUnmet(Message):
    """Requirements the deploy form's choices do not meet: shown, nothing submitted.
    `request` and `tokens` are what was checked, so a second deploy of the same goes on."""

    report: Report
    request: DeployRequest
    tokens: dict = field(repr=False)


@dataclass
class FormProblem(Message):
    """A user's input was refused by core: shown inline, under the form."""

    text: str


@dataclass
class DetailedConfig(Message):
    """The full detailed config (YAML) of what the form would deploy now, and its
    (diloco.inner_steps, diloco.overlap) as shown."""

    text: str
    diloco: tuple = ()


@dataclass
class ConfigChecked(Message):
    """The editor's text was checked: its problems (empty: valid)."""

    text: str
    problems: list[ConfigProblem]


@dataclass
class NodesImported(Message):
    nodes: list[Node]


@dataclass
class NodeProgress(Message):
    """A node's step started, progressed or ended, from the wizard's runner threads."""

    event: ProgressEvent


@dataclass
class BuildFinished(Message):
    """The preflight or the deploy ended."""

    stage: str
    outcome: BuildOutcome
