"""The cluster wizard's calls into core, in one place: plan, preflight, deploy with
per-node events, per-node logs, kubeconfig import, network matrix.

core.bootstrap is imported lazily (it pulls in SSH), and the screen sees only this small
surface; tests pass a stand-in with the same methods for the full deploy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from core.state.cluster_records import network_matrix
from core.bootstrap import default_steps
from core.bootstrap.progress import ProgressEvent
from core.state.store import Store


@dataclass
class WizardRequest:
    name: str
    nodes: list[str]
    vpn: bool = True
    subnet: str | None = None
    prepull: bool = False  # the optional `images` step
    k3s_bundle: str | None = None  # air-gap: a local dir with k3s, its images and containerd


@dataclass
class BuildOutcome:
    ok: bool
    lines: list[str] = field(default_factory=list)
    blocked: bool = False
    k3s_up: bool = True  # the server's k3s came up: there is a kubeconfig to import


class ClusterBuilder:
    def __init__(self, store: Store) -> None:
        self.store = store

    def steps(self, vpn: bool, prepull: bool = False) -> list[str]:
        return default_steps(vpn, prepull)

    def _run(self, request: WizardRequest, only: list[str] | None,
             on_event: Callable[[ProgressEvent], None] | None, record: bool) -> BuildOutcome:
        from core.bootstrap import deploy  # pulls in SSH: loaded when the wizard first runs

        from core.bootstrap.failures import check_bundle

        plan = deploy.build_plan(self.store, request.name, request.nodes, vpn=request.vpn,
                                 subnet=request.subnet or None)
        plan.prepull = request.prepull
        if request.k3s_bundle:
            plan.k3s.bundle = str(check_bundle(request.k3s_bundle, "air-gap bundle"))
        result = deploy.deploy(plan, only=only, store=self.store, on_event=on_event, record=record)
        summary = result.summary
        k3s_up = "k3s" in summary.done.get(plan.server.name, [])
        return BuildOutcome(summary.ok, summary.lines(), summary.blocked, k3s_up)

    def preflight(self, request: WizardRequest,
                  on_event: Callable[[ProgressEvent], None]) -> BuildOutcome:
        """Check every node before anything changes (no records written)."""
        return self._run(request, ["preflight"], on_event, record=False)

    def deploy(self, request: WizardRequest, on_event: Callable[[ProgressEvent], None]) -> BuildOutcome:
        return self._run(request, None, on_event, record=True)

    def node_log(self, cluster: str, node: str) -> Path:
        from core.bootstrap.deploy import node_log_path

        return node_log_path(cluster, node)

    def import_kubeconfig(self, cluster: str) -> str:
        from core.bootstrap.kubeconfig_import import merge

        return merge(cluster, store=self.store)

    def net_matrix(self, cluster: str) -> list[tuple[str, str, float | None, float | None]]:
        return network_matrix(self.store, cluster)
