"""A Kubernetes workspace's notifications (issue 43): the webhook's address in a Secret of its own,
`<job>-notify`, read by the watcher in the cluster (recipes/watcher.py, recipes.watcher_notify), which
sends COMPLETED, FAILED and RECOVERED with the user's laptop closed.

The address is a credential: it lives in that Secret only (never in argv, an env value, a ConfigMap,
the DB or an event), made or replaced by `geotrain workspaces notify ID` and deleted by `--off` and
with the workspace. Only the watcher's pod mounts it, as a file, 0400 (the pod's fsGroup makes it
0440 root:1000, as the store token: core.kubernetes.elastic_manifests.TOKEN_MODE).

The watcher's Deployment always mounts it with `optional: true`, so a workspace deployed without
notifications starts, and one that gets them later needs no redeploy: kubelet projects a Secret
that appears or changes into the mounted volume on its next sync (eventually consistent, within
the kubelet sync period plus its cache's TTL), "Mounted Secrets are updated automatically"
(https://kubernetes.io/docs/concepts/configuration/secret/#mounted-secrets-are-updated-automatically;
optional volumes: https://kubernetes.io/docs/concepts/configuration/secret/#restriction-secret-must-exist).
The mount is a directory, never a subPath (a subPath mount receives no updates); the watcher reads
the file each time it sends.
"""

from __future__ import annotations

from typing import Any

NOTIFY_KEY = "url"
NOTIFY_DIR = "/var/run/geotrain/notify"
NOTIFY_FILE = f"{NOTIFY_DIR}/{NOTIFY_KEY}"
NOTIFY_MODE = 0o400
VOLUME = "notify"


def notify_secret_name(job: str) -> str:
    return f"{job}-notify"


def render_notify_secret(job: str, metadata: dict[str, Any], url: str) -> dict[str, Any]:
    """The Secret holding the address (checked by the caller: core.domain.notifications.check_url)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {**metadata, "name": notify_secret_name(job)}, "stringData": {NOTIFY_KEY: url}}


def mount_notify(pod_spec: dict[str, Any], container: dict[str, Any], job: str, uid: int) -> None:
    """The watcher's pod: the Secret as an optional 0400 file, and the argument naming it."""
    pod_spec.setdefault("volumes", []).append(
        {"name": VOLUME, "secret": {"secretName": notify_secret_name(job), "defaultMode": NOTIFY_MODE,
                                    "optional": True, "items": [{"key": NOTIFY_KEY, "path": NOTIFY_KEY}]}})
    container.setdefault("volumeMounts", []).append({"name": VOLUME, "mountPath": NOTIFY_DIR, "readOnly": True})
    pod_spec.setdefault("securityContext", {}).setdefault("fsGroup", uid)
    container["command"] += ["--notify-file", NOTIFY_FILE]
