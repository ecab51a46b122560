"""The interface every workspace backend implements (local processes, Kubernetes)."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from core.domain.records import WorkspaceSpec
from core.errors import InvalidInput


@dataclass
class WorkerState:
    name: str  # "worker-0", or a pod name
    status: str
    detail: str = ""


@dataclass
class WorkspaceState:
    status: str  # a core.domain.records.Status value
    reason: str = ""
    workers: list[WorkerState] = field(default_factory=list)
    exit_code: int | None = None


@dataclass
class WorkerProcess:
    """One worker's process (local) or pod (Kubernetes), as the drill-down lists it; every text
    in it is the worker's or the cluster's words (print through terminal_text.printable)."""

    name: str  # worker-N, or the pod's name
    rank: int | None
    state: str
    pid: int | None = None  # local: the live process, None once it ended
    node: str = ""  # Kubernetes: the node it runs on
    datacenter: str = ""
    restarts: int = 0
    events: list[str] = field(default_factory=list)  # the last few, oldest first, one line each
    detail: list[tuple[str, str]] = field(default_factory=list)  # describe-like (field, value)


@dataclass
class ShellTarget:
    """A shell in a worker's environment: what to run, with which environment and directory.
    Secrets travel in `env` as they do to the worker, never in `argv`."""

    argv: list[str]
    env: dict[str, str] = field(repr=False)
    cwd: str
    what: str  # 'worker-1 of ID (pid 123)', for the line printed before the shell starts
    relay: Callable[[], int] | None = None  # a pod: its exec stream relayed to this terminal

    def run(self) -> int:
        """Run it on this terminal until it exits; its exit code."""
        if self.relay is not None:
            return self.relay()
        import subprocess

        return subprocess.call(self.argv, env=self.env, cwd=self.cwd)


@dataclass
class LaunchPlan:
    """What deploy would do, for --dry-run: a human-readable text and the resolved config."""

    description: str
    config_yaml: str


class Backend(abc.ABC):
    """Runs workspaces. `workspace_id` is assigned by core.workspaces before deploy."""

    NOTIFIES = False  # a process of this backend on this machine sees the run end (core.backends.local.notifier)
    WEBHOOK_IN_CLUSTER = False  # a process in the cluster sends the webhook (core.backends.kubernetes_notify)

    @abc.abstractmethod
    def plan(self, workspace_id: str, spec: WorkspaceSpec) -> LaunchPlan:
        """What deploy would launch; contacts nothing and changes nothing."""

    @abc.abstractmethod
    def deploy(self, workspace_id: str, spec: WorkspaceSpec, secret_refs: dict[str, str]) -> str:
        """Start the workspace; returns its run directory or resource name.

        `secret_refs` maps env var names (WANDB_API_KEY, HF_TOKEN) to references in
        core.state.secret_store.SecretStore; the backend resolves them itself and passes the values
        only through the workers' environment or a Kubernetes Secret.
        """

    @abc.abstractmethod
    def status(self, workspace_id: str) -> WorkspaceState:
        ...

    def list(self) -> list[str]:
        """Ids of the workspaces this backend knows about (may be empty)."""
        return []

    @abc.abstractmethod
    def logs(self, workspace_id: str, follow: bool = False) -> Iterator[tuple[str, str]]:
        """Yield (worker, line) pairs; with follow, until the workspace ends."""

    @abc.abstractmethod
    def delete(self, workspace_id: str) -> None:
        """Stop everything of the workspace and remove its files/resources. Idempotent."""

    def remove_node_files(self, workspace_id: str, spec: WorkspaceSpec,
                          remove_dirs: Callable[[list[str], str, str], list[str]]) -> None:
        """After delete: remove what the workspace kept outside the backend's own objects (a
        Kubernetes workspace's node directory, through `remove_dirs(nodes, base, job)` ->
        failures, core.nodes.node_dirs); nothing for most backends."""

    def kept_after_delete(self, workspace_id: str, spec: WorkspaceSpec) -> str:
        """What a delete leaves behind and where, in words; '' when nothing."""
        return ""

    def recover(self, workspace_id: str, spec: WorkspaceSpec, state: WorkspaceState) -> str | None:
        """Bring a failed or vanished workspace back (it resumes from its newest checkpoint);
        the cause in words, or None when there is nothing this backend can or should do."""
        return None

    def history(self, workspace_id: str) -> list[dict]:
        """Events the backend recorded on its own (failures, recoveries), oldest first."""
        return []

    def watcher(self, workspace_id: str) -> dict | None:
        """The last word of the workspace's watcher in the cluster (core.kubernetes.watcher_history:
        updated_at, used, budget, job_phase, pods, running); None where there is none."""
        return None

    def metrics(self, workspace_id: str) -> list[dict]:
        """Metrics rows (step, loss, bytes_sent …) the recipe has written so far."""
        return []

    def utilization(self, workspace_id: str) -> dict[str, dict]:
        """Each worker's last utilization figures (core.domain.run_events.utilization), by worker name;
        empty where the backend does not collect them."""
        return {}

    def processes(self, workspace_id: str) -> list[WorkerProcess]:
        """The workspace's worker processes or pods, with their state, restarts and last events."""
        return []

    def shell(self, workspace_id: str, rank: int, shell: str) -> ShellTarget:
        """`shell` (an absolute path) in worker `rank`'s environment and directory."""
        raise InvalidInput("this cluster gives no shell in a worker's environment",
                           "use `geotrain workspaces pods ID` to see its workers")

    def utilization_history(self, workspace_id: str) -> dict[str, list[dict]]:
        """Each worker's recent utilization figures, oldest first (bounded), by worker name."""
        return {}

    def result_files(self, workspace_id: str, spec: WorkspaceSpec) -> dict[str, Path]:
        """Name in an export -> file or folder on this machine (config.yaml, logs, checkpoints …);
        empty where results live elsewhere (pods: logs and metrics come through the API)."""
        return {}

    def copy_checkpoints(self, workspace_id: str, dest: Path) -> list[str] | None:
        """Copy checkpoints kept elsewhere (pods) under `dest`: the names skipped, or None
        when they cannot be reached now."""
        return None

    def check_restore(self) -> None:
        """Refuse `--resume-from` before anything is stored, where restore is not supported."""
        raise InvalidInput("--resume-from works on the local cluster only",
                           "on Kubernetes, upload the checkpoint to an HF repo and set recovery.hf_repo")

    def restore(self, workspace_id: str, spec: WorkspaceSpec, export: Any) -> list[Path]:
        """Seed a workspace about to be deployed with an export's newest checkpoint
        (`export`: a core.backends.export.ExportedRun; not imported here, export imports us);
        the files written, removed again if the deploy fails."""
        raise InvalidInput("--resume-from works on the local cluster only",
                           "on Kubernetes, upload the checkpoint to an HF repo and set recovery.hf_repo")
