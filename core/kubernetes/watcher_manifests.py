"""The workspace's watcher (recipes/watcher.py) in the cluster: its history ConfigMap, a
ServiceAccount, a Role allowing only the calls it makes on the workspace's own objects, the
RoleBinding, and a Deployment of one pod; created with the workspace and deleted with it.

The watcher, not the user's geotrain process, replaces a lost trainer pod and counts the
recoveries, so training recovers with the laptop closed. The Job's task policies make Volcano
restart only that pod (pod_policies below).
"""

from __future__ import annotations

from typing import Any

from core.kubernetes.notify_secret import mount_notify

WATCHER_CONTAINER = "watcher"
WATCHER_UID = 1000  # the trainers' user (core.kubernetes.manifests.POD_UID): the same Pod Security profile
POLL_S = 5
WATCHED_ANNOTATION = "geotrain.io/watcher"  # on the Job: its recovery is the watcher's, not the laptop's
FIND_PYTHON = ('py=$(command -v python3 || command -v python) || '
               '{ echo "geotrain: the image has no python" >&2; exit 1; }\n')


def watcher_name(job: str) -> str:
    return f"{job}-watcher"


def history_name(job: str) -> str:
    return f"{job}-history"


def pod_names(job_manifest: dict[str, Any]) -> list[str]:
    """Every pod Volcano makes for the job: `<job>-<task>-<index>` (volcano v1.11.0,
    pkg/controllers/job/helpers/helpers.go PodNameFmt "%s-%s-%d")."""
    job = job_manifest["metadata"]["name"]
    return [f"{job}-{task['name']}-{i}" for task in job_manifest["spec"]["tasks"] for i in range(task["replicas"])]


def restart_pod_allowed(cluster_config: dict[str, Any]) -> bool:
    """Whether the cluster's Volcano takes RestartPod: v1.11.0 and later (pkg/webhooks/admission/jobs/
    validate/util.go policyActionMap; v1.10.0's refuses it, and the whole Job with it). Known only for
    clusters geotrain built (their config records the Volcano it installed); elsewhere not assumed."""
    version = str(((cluster_config.get("volcano") or {}) if isinstance(cluster_config.get("volcano"), dict)
                   else {}).get("version") or "")
    parts = version.lstrip("v").split(".")
    return len(parts) >= 2 and all(p.isdigit() for p in parts[:2]) and (int(parts[0]), int(parts[1])) >= (1, 11)


def pod_policies(job_manifest: dict[str, Any], restart_pod: bool) -> None:
    """A lost pod restarts alone, never the job (Volcano v1.11.0):
    - pkg/controllers/job/job_controller_util.go applyPolicies: a task's own policies are read
      before the job's, for requests that name the task (pod events do); an event no policy names
      gets SyncJob;
    - pkg/controllers/job/job_controller_handler.go deletePod: a deleted pod (the watcher's
      delete, a preemption, a drained node) arrives as PodEvicted;
    - pkg/controllers/job/job_controller_actions.go syncJob makes every pod that does not exist
      again (`if pod, found := pods[podName]; !found`), same name: with or without a policy;
    - with `restart_pod` (a Volcano that has it, restart_pod_allowed) each task also says
      PodEvicted -> RestartPod: state/running.go KillTarget(TargetTypePod) and RetryCount++, so
      restarting.go fails the job once RetryCount reaches maxRetry (= recovery.max_recoveries), a
      backstop to the watcher's own count.
    PodFailed has no policy, job or task: a failed pod waits for the watcher, which replaces it
    within the budget and writes down why (the job's old PodFailed -> RestartJob stopped
    every datacenter for one lost pod)."""
    job_manifest["spec"].pop("policies", None)
    if restart_pod:
        for task in job_manifest["spec"]["tasks"]:
            task["policies"] = [*task.get("policies", []), {"event": "PodEvicted", "action": "RestartPod"}]
    job_manifest["metadata"].setdefault("annotations", {})[WATCHED_ANNOTATION] = watcher_name(
        job_manifest["metadata"]["name"])


def _role(job_manifest: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """Only the verbs recipes/watcher.py uses, on the workspace's own objects by name where RBAC
    can say so (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources:
    `list` cannot be narrowed by resourceNames, so reading the namespace's pods is the one wider rule)."""
    job = job_manifest["metadata"]["name"]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {**metadata, "name": watcher_name(job)},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"],
                       "resourceNames": pod_names(job_manifest)},
                      {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"],  # steps reached, resumed
                       "resourceNames": pod_names(job_manifest)},
                      {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
                       "resourceNames": [history_name(job)]},
                      {"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["get"],
                       "resourceNames": [job]}]}


def _pod(job_manifest: dict[str, Any], namespace: str, budget: int, image: str, labels: dict[str, str],
         source: dict[str, Any] | None) -> dict[str, Any]:
    job = job_manifest["metadata"]["name"]
    args = ["--namespace", namespace, "--job", job, "--history", history_name(job),
            "--max-recoveries", str(budget), "--poll-s", str(POLL_S)]
    container: dict[str, Any] = {
        "name": WATCHER_CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
        # the values travel as arguments ("$@"), never inside the script
        "command": ["/bin/sh", "-c", FIND_PYTHON + 'exec "$py" -m recipes.watcher "$@"', "watcher", *args],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": WATCHER_UID, "runAsGroup": WATCHER_UID,
                            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}}}
    spec: dict[str, Any] = {"serviceAccountName": watcher_name(job), "automountServiceAccountToken": True,
                            "containers": [container], "volumes": [],
                            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}
    if source is not None:  # the upstream image: the recipes source from the workspace's ConfigMaps
        spec["volumes"].append(source)
        container["volumeMounts"] = [{"name": source["name"], "mountPath": "/opt/geotrain/src", "readOnly": True}]
        container["env"].append({"name": "PYTHONPATH", "value": "/opt/geotrain/src"})
    mount_notify(spec, container, job, WATCHER_UID)  # the webhook's address, when the workspace has one
    return {"metadata": {"labels": labels}, "spec": spec}


def render_watcher(job_manifest: dict[str, Any], metadata: dict[str, Any], watcher_label: dict[str, str],
                   budget: int, image: str, source: dict[str, Any] | None) -> list[dict[str, Any]]:
    """History ConfigMap, ServiceAccount, Role, RoleBinding, Deployment, in creation order.
    `metadata`: the workspace's (namespace, labels, annotations); `watcher_label`: the label the job's
    NetworkPolicy admits on the store ports (core.kubernetes.network_policy.WATCHER_LABEL); the
    watcher's pod carries it and not the workspace label, so the trainers' anti-affinity and the
    job's own-pods rule do not count it as a trainer."""
    job, namespace = job_manifest["metadata"]["name"], metadata["namespace"]
    name = watcher_name(job)
    labels = {**watcher_label, "app.kubernetes.io/managed-by": "geotrain"}
    history = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**metadata, "name": history_name(job)},
               "data": {"history.json": "[]", "watcher.json": "{}"}}
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**metadata, "name": name},
               "automountServiceAccountToken": False}  # only the watcher's pod mounts it, by asking
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {**metadata, "name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {**metadata, "name": name},
                  "spec": {"replicas": 1, "strategy": {"type": "Recreate"},  # never two watchers at once
                           "selector": {"matchLabels": dict(watcher_label)},
                           "template": _pod(job_manifest, namespace, budget, image, labels, source)}}
    return [history, account, _role(job_manifest, metadata), binding, deployment]
