"""recovery.keep_failed_pods on Kubernetes: a failed pod stays where it failed, for `workspaces pods
--describe`, its logs and events, instead of being deleted by a job restart.

Volcano v1.11.0 (volcano-sh/volcano at tag v1.11.0):
- pkg/controllers/job/job_controller_util.go applyPolicies: an event no task or job policy names
  gets SyncJobAction;
- pkg/controllers/job/job_controller_actions.go syncJob: creates only the pods that do not exist
  (`if pod, found := pods[podName]; !found`), and counts a Failed one as failed, leaving it in place;
- pkg/controllers/job/state/running.go: RestartJob is KillJob(PodRetainPhaseNone), which deletes
  every pod, a failed one too (killPods keeps Failed and Succeeded pods, PodRetainPhaseSoft, only
  at the last retry or for AbortJob/TerminateJob/CompleteJob; state/factory.go).
So the job keeps no PodFailed policy at either level, and the laptop-side recovery check, which
deletes and resubmits the job, leaves a job with KEEP_ANNOTATION alone. The trainer's pods get
restartPolicy Never, so a crashed trainer leaves its pod Failed with its container's state and log,
rather than being started again in place by kubelet under OnFailure (Kubernetes docs, Pod
Lifecycle, "Container restart policy": https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#restart-policy).
A pod that is evicted or deleted is gone either way (PodEvicted's policy still applies).
"""

from __future__ import annotations

from typing import Any

KEEP_ANNOTATION = "geotrain.io/keep-failed-pods"


def _without_pod_failed(policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in policies if p.get("event") != "PodFailed" and "PodFailed" not in (p.get("events") or [])]


def keep_failed_pods(job_manifest: dict[str, Any], recovery: dict[str, Any] | None) -> dict[str, Any]:
    """The Volcano Job, changed in place so that a failed pod is kept (see the module's docstring)
    when the spec's `recovery` says keep_failed_pods: true."""
    from core.domain.recovery import RecoverySettings

    if not RecoverySettings.from_dict(recovery).keep_failed_pods:
        return job_manifest
    spec = job_manifest["spec"]
    if "policies" in spec:
        spec["policies"] = _without_pod_failed(spec["policies"])
    for task in spec["tasks"]:
        if "policies" in task:
            task["policies"] = _without_pod_failed(task["policies"])
        task["template"]["spec"]["restartPolicy"] = "Never"
    job_manifest["metadata"].setdefault("annotations", {})[KEEP_ANNOTATION] = "true"
    return job_manifest


def keeps_failed_pods(job: dict[str, Any]) -> bool:
    """The deployed job was made with recovery.keep_failed_pods."""
    return ((job.get("metadata") or {}).get("annotations") or {}).get(KEEP_ANNOTATION) == "true"
