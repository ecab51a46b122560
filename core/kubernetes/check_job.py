"""The Volcano check job of `clusters check` on a registered Kubernetes cluster (issue 43): one pod per
node (anti-affinity on the hostname, gang-scheduled), each a rank of recipes.cluster_check: the burn-in
of its device, then one all-reduce of the presets' payload over all of them (NCCL where GPUs are,
gloo otherwise). Rank 0 serves the group's authenticated store (recipes.elastic_store) on its pod IP;
the others reach it by the job's headless-service name (Volcano's svc plugin, not-ready addresses
published). Its token lives in a Secret only, read from a file (GEOTRAIN_ELASTIC_STORE_TOKEN_FILE);
a NetworkPolicy admits only the job's own pods. The check's modules travel in one ConfigMap (the
recipes delivery's projected volume, core.kubernetes.recipes_delivery), the upstream PyTorch image
carries torch. Each pod prints `geotrain-check {json}`; results_from_logs reads those lines back."""

from __future__ import annotations

import shlex
from typing import Any

from core.domain.check_modules import MODULES, module_path, module_sources
from core.domain.check_results import judge_node, parse_rank_line
from core.domain.images import image_for
from core.domain.records import Cluster
from core.domain.terminal_text import printable
from core.kubernetes import recipes_delivery as delivery
from core.kubernetes.manifests import API_VERSION, DEFAULT_QUEUE, MANAGED, POD_UID
from core.kubernetes.network_policy import render_network_policy
from core.kubernetes.node_groups import NodeGroup

CHECK_LABEL = "geotrain.io/check"
STORE_PORT = 29531
TOKEN_DIR = "/var/run/geotrain-check"
TASK = "check"
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
CHECK_TIMEOUT_S = 600  # the whole job: scheduling, image pull, burn-in, all-reduce


def job_name(cluster: str) -> str:
    return f"geotrain-check-{cluster}"[:63].rstrip("-")


def token_secret_name(job: str) -> str:
    return f"{job}-token"


def _metadata(job: str, name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {CHECK_LABEL: job, **MANAGED}}


def task_names(groups: list[NodeGroup]) -> list[str]:
    """One task per node group (its image and devices): `check`, or check0, check1, ..."""
    return [TASK] if len(groups) == 1 else [f"{TASK}{i}" for i in range(len(groups))]


def _pod_script(job: str, first_task: str, offset: int, nodes: int, seconds: float, payload_bytes: int) -> str:
    """RANK: the pods before this task's, plus its index in the task (Volcano's env plugin)."""
    args = ["--seconds", repr(float(seconds)), "--payload-bytes", str(int(payload_bytes)),
            "--store", f"{job}-{first_task}-0.{job}:{STORE_PORT}"]
    return (delivery.FIND_PYTHON
            + f'export RANK=$(({int(offset)} + ${{VC_TASK_INDEX:?Volcano sets the task index}})) WORLD_SIZE={int(nodes)}\n'
            + 'serve=""; [ "$RANK" = 0 ] && serve="--serve-store --store-bind $POD_IP"\n'
            + f'exec "$py" -m recipes.cluster_check {shlex.join(args)} $serve\n')


def _template(job: str, group: NodeGroup, script: str, source: dict[str, Any]) -> dict[str, Any]:
    hostnames = list(group.hostnames)
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "8Gi"}}
    if group.vendor in GPU_RESOURCE:
        resources["limits"][GPU_RESOURCE[group.vendor]] = "1"  # one device per node is burned in here
    container = {
        "name": "check", "image": image_for(group.vendor, None, group.arch).image, "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "PYTHONPATH", "value": delivery.SOURCE_DIR}, {"name": "PYTHONUNBUFFERED", "value": "1"},
                {"name": "HOME", "value": "/tmp"}, {"name": "GEOTRAIN_ELASTIC_STORE_RETRY_S", "value": "300"},
                {"name": "GEOTRAIN_ELASTIC_STORE_TOKEN_FILE", "value": f"{TOKEN_DIR}/token"}],
        "ports": [{"name": "store", "containerPort": STORE_PORT}],
        "resources": resources,
        "securityContext": {"runAsNonRoot": True, "runAsUser": POD_UID, "runAsGroup": POD_UID,
                            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": "recipes-src", "mountPath": delivery.SOURCE_DIR, "readOnly": True},
                         {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True}],
    }
    spec = {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [container],
            "securityContext": {"runAsNonRoot": True, "fsGroup": POD_UID, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [source, {"name": "token", "secret": {"secretName": token_secret_name(job),
                                                              "defaultMode": 0o440}}],
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {CHECK_LABEL: job}}, "topologyKey": "kubernetes.io/hostname"}]},
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                    "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": hostnames}]}]}}}}
    return {"metadata": {"labels": {CHECK_LABEL: job, **MANAGED}}, "spec": spec}


def render_check_job(cluster: Cluster, groups: list[NodeGroup], seconds: float, payload_bytes: int,
                     token: str, namespace: str = "default") -> list[dict[str, Any]]:
    """Secret, ConfigMap(s) of the check's modules, NetworkPolicy, then the Volcano Job (created in that
    order; deleted in reverse). A task per node group: a pod on each of its nodes."""
    job = job_name(cluster.name)
    hostnames = [h for g in groups for h in g.hostnames]
    if not hostnames:
        raise ValueError("no nodes to check")
    sources = module_sources()
    files = [delivery.SourceFile(module_path(name), sources[name]) for name in MODULES]
    maps = delivery.render_source_maps(job, _metadata(job, "", namespace), files)
    source = delivery.source_volume(maps, files)
    names, tasks, offset = task_names(groups), [], 0
    for name, group in zip(names, groups):
        count = len(group.hostnames)
        script = _pod_script(job, names[0], offset, len(hostnames), seconds, payload_bytes)
        tasks.append({"name": name, "replicas": count, "minAvailable": count,
                      "template": _template(job, group, script, source)})
        offset += count
    # no CompleteJob policy: the job completes when every pod has (a rank that ends first must not end the rest)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": _metadata(job, token_secret_name(job), namespace), "stringData": {"token": token}}
    policy = render_network_policy(job, _metadata(job, "", namespace), {CHECK_LABEL: job}, [STORE_PORT])
    manifest = {
        "apiVersion": API_VERSION, "kind": "Job", "metadata": _metadata(job, job, namespace),
        "spec": {"schedulerName": "volcano", "queue": cluster.config.get("queue") or DEFAULT_QUEUE,
                 "minAvailable": len(hostnames), "maxRetry": 1,
                 "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
                 "tasks": tasks}}
    return [secret, *maps, policy, manifest]


def results_from_logs(cluster: str, logs: dict[str, tuple[str, str]], world: int) -> tuple[list[dict], list[dict]]:
    """(nodes, links) from each pod's log: pod name -> (its node, its log text). A pod with no
    `geotrain-check` line is its node's failure; the all-reduce over every pod is one link."""
    nodes, ranks = [], []
    for pod, (node, text) in sorted(logs.items()):
        parsed = next((p for p in map(parse_rank_line, text.splitlines()[-200:]) if p), None)
        if parsed is None:
            last = printable((text.strip().splitlines() or ["no output"])[-1])[:200]  # the pod's words, shown
            nodes.append(judge_node(node, [], [], [], failed=f"pod {pod} gave no result: {last}"))
            continue
        ranks.append(parsed)
        nodes.append(judge_node(node, [parsed], [], []))
    links = []
    if ranks:
        slowest = min(ranks, key=lambda r: r["busbw"])
        links.append({"name": f"{cluster}: all-reduce over {len(ranks)} of {world} nodes ({slowest['backend']})",
                      "a": cluster, "b": cluster, "kind": "job", "bytes": slowest["reduce_bytes"],
                      "seconds": slowest["reduce_seconds"], "busbw": slowest["busbw"], "world": slowest["world"],
                      "ok": len(ranks) == world, "why": None if len(ranks) == world else
                      f"{world - len(ranks)} of {world} pods gave no result", "slow": False,
                      "ping_ms": None, "probe_mbit_s": None})
    return nodes, links
