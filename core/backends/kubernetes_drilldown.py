"""A Kubernetes workspace's pods and a shell in one (issue 43), mixed into KubernetesBackend: the
pod list through the client (core.kubernetes.pod_drilldown), exec through its websocket
(core.kubernetes.pod_shell); the checkpoints copied out of the pods the same way."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from core.backends.base import ShellTarget, WorkerProcess
from core.errors import BackendError
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

    def copy_checkpoints(self, workspace_id: str, dest: Path) -> list[str] | None:
        """Checkpoints out of every running pod of the workspace (each node may hold only its
        ranks' files), merged under `dest`; None when no pod runs (exec needs a live container)."""
        from core.kubernetes.pod_files import read_checkpoint_archive, unpack_checkpoints

        pods = [p["metadata"]["name"] for p in self._pods(workspace_id)
                if (p.get("status") or {}).get("phase") == "Running"]
        if not pods:
            return None
        skipped: list[str] = []
        spool_dir = next((d for d in (dest, dest.parent) if d.is_dir()), None)  # the export's own, private
        for pod in pods:
            try:
                with self._errors(f"copying checkpoints out of pod {pod}"):
                    archive = read_checkpoint_archive(client.CoreV1Api(self.api), pod, self.namespace, CONTAINER,
                                                      spool_dir)
            except BackendError:
                raise
            except Exception as exc:  # the websocket library's own errors
                raise BackendError(f"copying checkpoints out of pod {pod} failed: {type(exc).__name__}: "
                                   f"{str(exc)[:200]}", "export again, or set recovery.hf_repo") from None
            with archive:
                skipped += unpack_checkpoints(archive, dest)[1]
        return skipped
