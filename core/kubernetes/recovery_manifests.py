"""What recovery adds to a workspace's Volcano job: the checkpoint volume, the retry
policies and the recovery settings the workers read (core.domain.recovery, recipes.checkpoint_store).

Each workspace sees only its own checkpoints, so one workspace's pods cannot plant a file
that another loads:
- by default a PersistentVolumeClaim of its own (`<job>-checkpoints`, created and deleted
  with the job by core.backends.kubernetes): k3s's `local-path` class on wizard clusters,
  the cluster's default class on registered ones, `recovery.storage_class` when set;
- a job of several pods needs a ReadWriteMany class for one claim; without one named
  (`local-path` volumes live on one node) each node keeps the workspace's checkpoints in
  its own directory `<DEFAULT_HOST_PATH>/<job>`, as with `recovery.host_path`;
- `recovery.pvc` (a claim the user made): only the sub-path `<job>` is mounted;
- `recovery.host_path`: only `<host_path>/<job>` is mounted, never the directory itself.
The pods run as the image's user (uid 1000); see checkpoint_pod_security().
"""

from __future__ import annotations

from typing import Any

from core.domain.records import Cluster, WorkspaceSpec
from core.domain.recovery import RecoverySettings
from core.kubernetes.watcher_manifests import pod_policies, restart_pod_allowed

CHECKPOINT_MOUNT = "/checkpoints"
DEFAULT_HOST_PATH = "/var/lib/geotrain/checkpoints"
POD_UID = POD_GID = 1000  # the recipes image's user (recipes/Dockerfile: useradd --uid 1000, USER 1000)
WIZARD_STORAGE_CLASS = "local-path"  # k3s ships the local-path provisioner as its default class
CLAIM_SIZE = "50Gi"  # local-path does not enforce it; elsewhere it is what the class provisions
# A node directory that kubelet creates (DirectoryOrCreate) is root's, mode 0755; fsGroup does
# not apply to hostPath volumes, so a root init step hands it to the pod's user, once.
OWNER_SCRIPT = (f'[ "$(stat -c %u {CHECKPOINT_MOUNT})" = {POD_UID} ] || '
                f"{{ chown {POD_UID}:{POD_GID} {CHECKPOINT_MOUNT} && chmod 0700 {CHECKPOINT_MOUNT}; }}")


def claim_name(job: str) -> str:
    return f"{job}-checkpoints"


def checkpoint_pod_security() -> dict[str, Any]:
    """Pod-level fields that make the checkpoint volume the pod user's: run as the image's
    uid/gid, and fsGroup so volumes that support ownership (most CSI claims) are group-writable."""
    return {"runAsUser": POD_UID, "runAsGroup": POD_GID, "fsGroup": POD_GID,
            "fsGroupChangePolicy": "OnRootMismatch"}


def storage_class(settings: RecoverySettings, cluster: Cluster) -> str | None:
    """The class of the workspace's own claim; None: the cluster's default."""
    if settings.storage_class:
        return settings.storage_class
    return WIZARD_STORAGE_CLASS if cluster.kind == "geotrain" else None


def uses_own_claim(settings: RecoverySettings, pods: int) -> bool:
    """True when the workspace gets a claim of its own (see the module docstring)."""
    if settings.pvc or settings.host_path:
        return False
    return pods == 1 or bool(settings.storage_class)


def render_checkpoint_claim(job: str, spec: WorkspaceSpec, cluster: Cluster,
                            metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The workspace's own PersistentVolumeClaim, or None when it uses another volume."""
    settings = RecoverySettings.from_dict(spec.recovery)
    if not uses_own_claim(settings, spec.workers):
        return None
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce" if spec.workers == 1 else "ReadWriteMany"],
        "resources": {"requests": {"storage": CLAIM_SIZE}}}
    cls = storage_class(settings, cluster)
    if cls:
        claim_spec["storageClassName"] = cls
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {**metadata, "name": claim_name(job)}, "spec": claim_spec}


def node_dir_base(settings: RecoverySettings, pods: int) -> str | None:
    """The node directory whose `<job>` sub-directory holds the checkpoints; None: a claim does."""
    if settings.pvc or uses_own_claim(settings, pods):
        return None
    return settings.host_path or DEFAULT_HOST_PATH


def checkpoint_volume(job: str, settings: RecoverySettings, cluster: Cluster,
                      pods: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount): the workspace's own directory and nothing beside it."""
    mount: dict[str, Any] = {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT}
    if settings.pvc:
        return ({"name": "checkpoints", "persistentVolumeClaim": {"claimName": settings.pvc}},
                {**mount, "subPath": job})
    base = node_dir_base(settings, pods)
    if base is None:
        return {"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim_name(job)}}, mount
    return {"name": "checkpoints", "hostPath": {"path": f"{base}/{job}", "type": "DirectoryOrCreate"}}, mount


def kept_after_delete(job: str, spec: WorkspaceSpec, cluster: Cluster) -> str:
    """What a workspace's delete leaves, and where ('' when nothing): a node directory is
    removed only where geotrain reaches the nodes (a cluster it built), never a user's claim."""
    settings = RecoverySettings.from_dict(spec.recovery)
    if settings.pvc:
        return (f"its checkpoints stay in your claim {settings.pvc}, under {job}/ (geotrain does "
                "not delete from a claim it did not make)")
    base = node_dir_base(settings, spec.workers)
    if base and cluster.kind != "geotrain":
        return (f"its checkpoints stay in {base}/{job} on each node its pods ran on (geotrain "
                "cannot reach the nodes of a cluster it did not build): remove that directory there")
    return ""


def resume_caveat(spec: WorkspaceSpec) -> str:
    """One line for the deploy when resuming depends on a rank landing on the node it wrote from:
    checkpoints in node directories (several pods, no ReadWriteMany class named, no claim of the
    user's) and no HF repo a rank could fetch its own from (recipes.checkpoint_store); '' otherwise.
    Ranks are not tied to nodes: torch/distributed/run.py's notices, 6: "RANK is NOT stable.
    Between restarts, the local workers on a node can be assigned a different range of ranks"."""
    settings = RecoverySettings.from_dict(spec.recovery)
    if spec.workers == 1 or node_dir_base(settings, spec.workers) is None or settings.hf_repo:
        return ""
    return ("each node keeps its own checkpoints and ranks are not tied to nodes: after a replaced node, or "
            "with fewer workers than nodes, a rank that lands elsewhere finds none and the run starts from "
            "step 0 (its log says so); to resume wherever ranks land, give the spec's recovery: a ReadWriteMany "
            "storage_class or an hf_repo (--config a spec, or --edit)")


def owner_init_container(image: str, mount: dict[str, Any]) -> dict[str, Any]:
    """Root for one chown of the workspace's node directory, with only CHOWN and FOWNER."""
    return {"name": "checkpoint-owner", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", OWNER_SCRIPT], "volumeMounts": [mount],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
            "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}}}


def recovery_env(job: str, spec: WorkspaceSpec) -> list[dict[str, Any]]:
    settings = RecoverySettings.from_dict(spec.recovery)
    env = settings.worker_env(CHECKPOINT_MOUNT)
    env["GEOTRAIN_MAX_RECOVERIES"] = str(settings.max_recoveries)
    return [{"name": k, "value": v} for k, v in sorted(env.items())]


def add_recovery(job_manifest: dict[str, Any], spec: WorkspaceSpec, cluster: Cluster) -> dict[str, Any]:
    """Mount the checkpoint volume in every pod, pass the settings, set the retry budget."""
    settings = RecoverySettings.from_dict(spec.recovery)
    name = job_manifest["metadata"]["name"]
    for task in job_manifest["spec"]["tasks"]:
        # fresh dicts per pod: shared ones would print as YAML anchors (&id001) in --dry-run
        volume, mount = checkpoint_volume(name, settings, cluster, spec.workers)
        pod = task["template"]["spec"]
        pod["volumes"].append(volume)
        pod["securityContext"] = {**pod.get("securityContext", {}), **checkpoint_pod_security()}
        if "hostPath" in volume:
            image = pod["containers"][0]["image"]
            pod.setdefault("initContainers", []).append(owner_init_container(image, dict(mount)))
        for container in pod["containers"]:
            container["volumeMounts"].append(dict(mount))
            container["env"] += recovery_env(name, spec)
    # Volcano fails the job when its retries reach maxRetry: the same budget the watcher counts.
    job_manifest["spec"]["maxRetry"] = settings.max_recoveries
    # A lost pod restarts alone (the workspace's watcher replaces it, Volcano makes it again);
    # torchrun's agents in the pods still running meet it at the next rendezvous, and a
    # restarted worker resumes from the newest complete checkpoint on the volume.
    pod_policies(job_manifest, restart_pod_allowed(cluster.config))
    return job_manifest
