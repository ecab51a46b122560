"""The cluster wizard's calls into core, in one place: plan, preflight, deploy with
per-node events, per-node logs, kubeconfig import, network matrix.

core.bootstrap is imported lazily (it pulls in SSH), and the screen sees only this small
surface; tests pass a stand-in with the same methods for the full deploy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from core import paths
from core.clusters import network_matrix
from core.errors import GeotrainError
from core.store import Store


@dataclass
class WizardRequest:
    name: str
    nodes: list[str]
    vpn: bool = True
    subnet: str | None = None


@dataclass
class NodeEvent:
    """Progress of one node in one step (mirrors core.bootstrap.plan.ProgressEvent)."""

    node: str
    step: str
    progress: float  # 0..1
    message: str
    state: str = "running"  # running | done | failed | skipped


@dataclass
class BuildOutcome:
    ok: bool
    lines: list[str] = field(default_factory=list)
    blocked: bool = False


def _bootstrap():
    try:
        from core.bootstrap import deploy as bootstrap_deploy
        from core.bootstrap import STEP_NAMES
    except ImportError:
        raise GeotrainError("the cluster wizard's core (core.bootstrap) is not installed in this"
                            " build", "use a build that includes it, or `geotrain clusters`"
                            " commands from a newer version") from None
    return bootstrap_deploy, STEP_NAMES


class ClusterBuilder:
    def __init__(self, store: Store) -> None:
        self.store = store

    def steps(self, vpn: bool) -> list[str]:
        _, names = _bootstrap()
        return [s for s in names if vpn or s != "wireguard"]

    def _run(self, request: WizardRequest, only: list[str] | None,
             on_event: Callable[[NodeEvent], None] | None, record: bool) -> BuildOutcome:
        deploy, _ = _bootstrap()
        plan = deploy.build_plan(self.store, request.name, request.nodes, vpn=request.vpn,
                                 subnet=request.subnet or None)
        forward = None
        if on_event:
            def forward(event) -> None:
                on_event(NodeEvent(event.node, event.step, event.progress, event.message,
                                   event.state))
        result = deploy.deploy(plan, only=only, store=self.store, on_event=forward, record=record)
        summary = result.summary
        return BuildOutcome(summary.ok, summary.lines(), summary.blocked)

    def preflight(self, request: WizardRequest,
                  on_event: Callable[[NodeEvent], None]) -> BuildOutcome:
        """Check every node before anything changes (no records written)."""
        return self._run(request, ["preflight"], on_event, record=False)

    def deploy(self, request: WizardRequest, on_event: Callable[[NodeEvent], None]) -> BuildOutcome:
        return self._run(request, None, on_event, record=True)

    def node_log(self, cluster: str, node: str) -> Path:
        return paths.home() / "logs" / "clusters" / cluster / f"{node}.log"

    def import_kubeconfig(self, cluster: str) -> str:
        try:
            from core.bootstrap.kubeconfig_import import merge
        except ImportError:
            _bootstrap()
            raise
        return merge(cluster, store=self.store)

    def net_matrix(self, cluster: str) -> list[tuple[str, str, float | None, float | None]]:
        return network_matrix(self.store, cluster)
