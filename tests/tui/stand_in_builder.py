"""Stands in for the wizard core (core.bootstrap) behind the surface of
tui.cluster_builder.ClusterBuilder for a full deploy, which for real installs containerd,
k3s and Volcano from the network: it emits the same per-node events the runner does,
writes per-node logs and a network matrix in the real store, and can pause mid-deploy."""

from __future__ import annotations

import threading
import time

from core.state.store import Store
from core.bootstrap.progress import ProgressEvent
from tui.cluster_builder import BuildOutcome, ClusterBuilder, WizardRequest

STEPS = ["preflight", "containerd", "wireguard", "netmatrix", "k3s", "volcano", "images", "kubeconfig"]


class StandInClusterBuilder(ClusterBuilder):
    def __init__(self, store: Store, hold_at: str | None = None, hold_seconds: float = 30,
                 fail_at: str | None = None, failure: str = "") -> None:
        super().__init__(store)
        self.fail_at, self.failure = fail_at, failure  # every node fails there with `failure`
        self.requests: list[WizardRequest] = []
        self.hold_at = hold_at  # the deploy waits before this step until `release` is set
        self.hold_seconds = hold_seconds
        self.release = threading.Event()
        self.holding = threading.Event()

    def steps(self, vpn: bool, prepull: bool = False) -> list[str]:
        return [s for s in STEPS if (vpn or s != "wireguard") and (prepull or s != "images")]

    def _log(self, request: WizardRequest, node: str, text: str) -> None:
        path = self.node_log(request.name, node)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as handle:
            handle.write(text + "\n")

    def _step(self, request: WizardRequest, step: str, on_event) -> None:
        for node in request.nodes:
            on_event(ProgressEvent(node, step, 0.5, f"{step}: running"))
            self._log(request, node, f"[{step}] $ geotrain-{step} --check")
        time.sleep(0.01)
        for node in request.nodes:
            on_event(ProgressEvent(node, step, 1.0, "done", "done"))

    def preflight(self, request: WizardRequest, on_event) -> BuildOutcome:
        self._step(request, "preflight", on_event)
        return BuildOutcome(True, [f"{n}: ok (preflight)" for n in request.nodes])

    def deploy(self, request: WizardRequest, on_event) -> BuildOutcome:
        self.requests.append(request)
        steps = self.steps(request.vpn, request.prepull)
        for step in steps:
            if step == self.fail_at:  # as the runner reports a failed step, then stops these nodes
                for node in request.nodes:
                    on_event(ProgressEvent(node, step, 1.0, self.failure, "failed"))
                done = steps[:steps.index(step)]
                return BuildOutcome(False, [f"{n}: FAILED at {step} (install): {self.failure}"
                                            for n in request.nodes],
                                    k3s_up="k3s" in done)
            if step == self.hold_at:
                on_event(ProgressEvent(request.nodes[0], step, 0.25, f"{step}: waiting"))
                self.holding.set()
                self.release.wait(self.hold_seconds)
            self._step(request, step, on_event)
        with self.store.write() as conn:
            conn.execute("INSERT OR IGNORE INTO clusters(name, kind, status, config, created_at,"
                         " updated_at) VALUES (?, 'geotrain', 'READY', '{}', 0, 0)", (request.name,))
            for i, src in enumerate(request.nodes):
                for j, dst in enumerate(request.nodes):
                    if src != dst:
                        conn.execute("INSERT INTO net_matrix VALUES (?,?,?,?,?,0)",
                                     (request.name, src, dst, 0.4 + i + j, 940.0 if i < j else 85.0))
        return BuildOutcome(True, [f"{n}: ok ({', '.join(steps)})"
                                   for n in request.nodes])

    def import_kubeconfig(self, cluster: str) -> str:
        return f"merged context {cluster} into ~/.kube/config"
