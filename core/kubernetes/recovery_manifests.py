"""What recovery adds to a workspace's Volcano job: the checkpoint volume, the retry
policies and the recovery settings the workers read (core.domain.recovery, recipes.checkpoint_store).

Checkpoints go to a PersistentVolumeClaim when one is named (it outlives any node), else
to a directory on the node (hostPath: it outlives the pod, and a pod restarted on the same
node resumes from it); with an HF repo set the hub holds the copy of record as well.
"""

from __future__ import annotations

from typing import Any

from core.domain.records import WorkspaceSpec
from core.domain.recovery import RecoverySettings

CHECKPOINT_MOUNT = "/checkpoints"
DEFAULT_HOST_PATH = "/var/lib/geotrain/checkpoints"


def checkpoint_volume(job: str, settings: RecoverySettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount); each workspace writes under its own sub-directory."""
    if settings.pvc:
        volume = {"name": "checkpoints", "persistentVolumeClaim": {"claimName": settings.pvc}}
    else:
        volume = {"name": "checkpoints",
                  "hostPath": {"path": settings.host_path or DEFAULT_HOST_PATH, "type": "DirectoryOrCreate"}}
    return volume, {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT}


def recovery_env(job: str, spec: WorkspaceSpec) -> list[dict[str, Any]]:
    settings = RecoverySettings.from_dict(spec.recovery)
    env = settings.worker_env(f"{CHECKPOINT_MOUNT}/{job}")
    env["GEOTRAIN_MAX_RECOVERIES"] = str(settings.max_recoveries)
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def add_recovery(job_manifest: dict[str, Any], spec: WorkspaceSpec) -> dict[str, Any]:
    """Mount the checkpoint volume in every pod, pass the settings, set the retry budget."""
    settings = RecoverySettings.from_dict(spec.recovery)
    name = job_manifest["metadata"]["name"]
    volume, mount = checkpoint_volume(name, settings)
    for task in job_manifest["spec"]["tasks"]:
        pod = task["template"]["spec"]
        pod["volumes"].append(volume)
        for container in pod["containers"]:
            container["volumeMounts"].append(mount)
            container["env"] += recovery_env(name, spec)
    job_manifest["spec"]["maxRetry"] = settings.max_recoveries
    # A lost pod restarts the job; torchrun inside resumes every worker from the newest
    # complete checkpoint on the volume. Evictions (spot capacity taken back) likewise.
    job_manifest["spec"]["policies"] = [{"event": "PodEvicted", "action": "RestartJob"},
                                        {"event": "PodFailed", "action": "RestartJob"}]
    return job_manifest
