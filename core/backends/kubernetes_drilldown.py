"""A Kubernetes workspace's pods and a shell in one (issue 43), mixed into KubernetesBackend: the
pod list through the client (core.kubernetes.pod_drilldown), exec through its websocket
(core.kubernetes.pod_shell)."""

from __future__ import annotations

from core.backends.base import ShellTarget, WorkerProcess
from core.kubernetes.pod_logs import CONTAINER
from core.kubernetes.pod_phases import events_by_pod


class PodDrilldown:
    """Needs the backend's api, namespace, _errors, _pods and _events."""

    def processes(self, workspace_id: str) -> list[WorkerProcess]:
        from core.kubernetes.pod_drilldown import pod_rows

        return [WorkerProcess(**row) for row in pod_rows(self._pods(workspace_id), events_by_pod(self._events()))]

    def shell(self, workspace_id: str, rank: int, shell: str) -> ShellTarget:
        """The pod's own shell (SHELL_COMMAND), not this machine's $SHELL."""
        from core.kubernetes.pod_shell import pick_pod, run_shell

        pod = pick_pod(self._pods(workspace_id), rank, workspace_id)

        def relay() -> int:
            with self._errors(f"opening a shell in pod {pod}"):
                return run_shell(self.api, pod, self.namespace, CONTAINER)
        return ShellTarget([], {}, "", f"pod {pod} of {workspace_id} (namespace {self.namespace})", relay)
