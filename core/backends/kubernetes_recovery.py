"""Recovery of a Kubernetes workspace, mixed into KubernetesBackend: what its watcher in the cluster
(recipes/watcher.py, core.kubernetes.watcher_manifests) wrote down, and, for a job deployed before
the watcher existed, the resubmission the CLI or app makes on refresh."""

from __future__ import annotations

from core.backends.base import WorkspaceState
from core.domain.records import Status, WorkspaceSpec
from core.kubernetes import watcher_history
from core.kubernetes.failed_pods import keeps_failed_pods
from core.kubernetes.manifests import deployed_settings, token_env_names
from core.kubernetes.names import job_name
from core.kubernetes.pod_phases import JOB_PHASES, failure, first_failures
from core.kubernetes.watcher_manifests import WATCHED_ANNOTATION


class JobRecovery:
    """Needs the backend's _job, _pods, _label, _manifests, _create, _delete_object and _history_map."""

    def recover(self, workspace_id: str, spec: WorkspaceSpec, state: WorkspaceState) -> str | None:
        """A pod that went Failed, or a job Volcano gave up on: submit the job again. Its
        pods mount the same checkpoint volume, so training resumes from the newest checkpoint."""
        job = self._job(workspace_id)
        if job is None or state.status == Status.COMPLETED.value or keeps_failed_pods(job):
            return None  # keeps_failed_pods: recovery.keep_failed_pods, the failed pod stays for a look
        if WATCHED_ANNOTATION in (job["metadata"].get("annotations") or {}):
            return None  # its watcher, in the cluster, replaces lost pods (recipes/watcher.py)
        phase = ((job.get("status") or {}).get("state") or {}).get("phase", "")
        failed = first_failures(self._pods(workspace_id))
        if not failed and JOB_PHASES.get(phase) is not Status.FAILED:
            return None
        if failed:
            pod = failed[0]
            cause = f"pod {self._label(workspace_id, pod['metadata']['name'])} failed ({failure(pod)})"
        else:
            cause = f"Volcano job {phase.lower()} after its own retries"
        manifest = self._manifests(workspace_id, spec, {n: "<hidden>" for n in token_env_names(spec)},
                                   deployed_settings(job))[-1]
        self._delete_object("Job", job_name(workspace_id))
        self._create(manifest)
        return cause

    def history(self, workspace_id: str) -> list[dict]:
        """The recoveries the workspace's watcher made and wrote down (core.kubernetes.watcher_history)."""
        return watcher_history.read_history(self._history_map(workspace_id))

    def watcher(self, workspace_id: str) -> dict | None:
        return watcher_history.read_state(self._history_map(workspace_id))
