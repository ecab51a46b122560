"""The cluster wizard's calls into core, in one place: plan, preflight, deploy with
per-node events, per-node logs, kubeconfig import, network matrix.

core.bootstrap is imported lazily (it pulls in SSH), and the screen sees only this small
surface; tests pass a stand-in with the same methods for the full deploy."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from core.state.cluster_records import network_matrix
from core.bootstrap import default_steps
from core.bootstrap.progress import ProgressEvent
from core.state.store import Store

if TYPE_CHECKING:
    from core.bootstrap.plan import ClusterPlan

UNVERIFIED_LABEL = "Install k3s unverified (as --insecure-skip-checksum)"


@dataclass
class WizardRequest:
    name: str
    nodes: list[str]
    vpn: bool = True
    subnet: str | None = None
    prepull: bool = False  # the optional `images` step
    k3s_bundle: str | None = None  # air-gap: a local dir with k3s, its images and containerd
    sha256: dict[str, str] = field(default_factory=dict)  # file name -> hash, as --sha256 gives
    insecure_skip_checksum: bool = False  # as --insecure-skip-checksum: the user's explicit choice


@dataclass
class BuildOutcome:
    ok: bool
    lines: list[str] = field(default_factory=list)
    blocked: bool = False
    k3s_up: bool = True  # the server's k3s came up: there is a kubeconfig to import


def app_words(plan: ClusterPlan) -> Callable[[str], str]:
    """Core's refusal of a file with no known sha256 says what to type in the CLI; in the app
    it says which field to fill, where the value is, or the checkbox."""
    from core.bootstrap import checksums

    def rewrite(text: str) -> str:
        for name in checksums.release_files(plan.k3s.version):
            text = text.replace(checksums.missing_message(plan.k3s, name), (
                f"{checksums.missing_reason(plan.k3s, name)}: esc to the options and fill "
                f"'sha256 of {name}' with the hash on its line in "
                f"{checksums.checksum_list(plan.k3s.version, name)}, checked out of band "
                f"(against a copy you got another way), or tick '{UNVERIFIED_LABEL}'"))
        return text
    return rewrite


class ClusterBuilder:
    def __init__(self, store: Store) -> None:
        self.store = store

    def steps(self, vpn: bool, prepull: bool = False) -> list[str]:
        return default_steps(vpn, prepull)

    def plan(self, request: WizardRequest) -> ClusterPlan:
        """What `clusters deploy` would build from the same choices; the hashes are merged
        into the cluster's kept ones and checked by the CLI's parser, so both save them alike."""
        from core.bootstrap import deploy  # pulls in SSH: loaded when the wizard first runs
        from core.bootstrap.checksums import parse_given
        from core.bootstrap.failures import check_bundle

        plan = deploy.build_plan(self.store, request.name, request.nodes, vpn=request.vpn,
                                 subnet=request.subnet or None)
        plan.prepull = request.prepull
        if request.k3s_bundle:
            plan.k3s.bundle = str(check_bundle(request.k3s_bundle, "air-gap bundle"))
        if request.sha256:
            given = [f"{name}={digest}" for name, digest in request.sha256.items()]
            plan.k3s.sha256 = {**plan.k3s.sha256, **parse_given(given, plan.k3s.version)}
        if request.insecure_skip_checksum:
            plan.k3s.insecure_skip_checksum = True
        return plan

    def _run(self, request: WizardRequest, only: list[str] | None,
             on_event: Callable[[ProgressEvent], None] | None, record: bool,
             planned: list[str] | None = None) -> BuildOutcome:
        from core.bootstrap import deploy

        plan = self.plan(request)
        in_app = app_words(plan)

        def report(event: ProgressEvent) -> None:
            on_event(replace(event, message=in_app(event.message)))
        result = deploy.deploy(plan, only=only, store=self.store, record=record,
                               on_event=report if on_event else None, planned=planned)
        summary = result.summary
        k3s_up = "k3s" in summary.done.get(plan.server.name, [])
        return BuildOutcome(summary.ok, [in_app(line) for line in summary.lines()],
                            summary.blocked, k3s_up)

    def preflight(self, request: WizardRequest,
                  on_event: Callable[[ProgressEvent], None]) -> BuildOutcome:
        """Check every node before anything changes (no records written), judged for the
        steps the deploy will run: containerd, the release files' sha256 and the rest."""
        return self._run(request, ["preflight"], on_event, record=False,
                         planned=self.steps(request.vpn, request.prepull))

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
