"""`clusters check` on a registered Kubernetes cluster (issue 43): the Volcano check job
(core.kubernetes.check_job) created through the workspaces' client path, its pods watched until each
has ended (or CHECK_TIMEOUT_S), their `geotrain-check` lines read from the pods' logs, everything the
check made deleted again. A fresh store token per check, in its Secret only."""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Callable

from kubernetes import client

from core.backends.kubernetes import KubernetesBackend
from core.domain.link_verdicts import cluster_verdict
from core.domain.records import Cluster
from core.errors import BackendError, InvalidInput
from core.kubernetes.admission import admission_errors
from core.kubernetes.check_job import CHECK_TIMEOUT_S, job_name, render_check_job, results_from_logs
from core.kubernetes.client import REQUEST_TIMEOUT
from core.kubernetes.pod_logs import read_json
from core.kubernetes.pod_security import POD_SECURITY_KEY, job_violations

POLL_S = 2.0
LOG_LINES = 200
LOG_BYTES = 512 << 10
ENDED = ("Succeeded", "Failed")
# The check's pods run restricted: no host kernel log, no nvidia-smi of the host (SSH clusters read both)
NO_GPU_FACTS = "ECC counters and Xids are not read by the Volcano check job (its pods cannot read the host's kernel log)"


def _pods(backend: KubernetesBackend, job: str) -> list[dict]:
    with backend._errors(f"listing the pods of {job}"):
        response = client.CoreV1Api(backend.api).list_namespaced_pod(
            backend.namespace, label_selector=f"volcano.sh/job-name={job}", _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT)
    return sorted(read_json(response).get("items", []), key=lambda p: p["metadata"]["name"])


def _log(backend: KubernetesBackend, pod: str) -> str:
    try:
        with backend._errors(f"reading the log of {pod}"):
            return client.CoreV1Api(backend.api).read_namespaced_pod_log(
                pod, backend.namespace, container="check", tail_lines=LOG_LINES, limit_bytes=LOG_BYTES,
                _request_timeout=REQUEST_TIMEOUT)
    except BackendError as exc:
        return f"log not readable: {exc}"


def _wait(backend: KubernetesBackend, job: str, world: int, timeout: float,
          progress: Callable[[str], None] | None) -> list[dict]:
    deadline, said = time.monotonic() + timeout, None
    while True:
        pods = _pods(backend, job)
        ended = [p for p in pods if (p.get("status") or {}).get("phase") in ENDED]
        line = f"{job}: {len(pods)} of {world} pods made, {len(ended)} ended"
        if progress and line != said:
            progress(line)
            said = line
        if (len(pods) >= world and len(ended) == len(pods)) or time.monotonic() > deadline:
            return pods
        time.sleep(POLL_S)


def check_kubernetes_cluster(store, cluster: Cluster, seconds: float, payload_bytes: int,
                             progress: Callable[[str], None] | None = None, api=None,
                             timeout: float = CHECK_TIMEOUT_S) -> dict:
    backend = KubernetesBackend(cluster)
    if api is not None:
        backend._api = api
    groups = backend._groups()
    manifests = render_check_job(cluster, groups, seconds, payload_bytes, secrets.token_hex(32), backend.namespace)
    job = manifests[-1]
    problems = admission_errors(job) + job_violations(job, cluster.config.get(POD_SECURITY_KEY) or "restricted")
    if problems:
        raise InvalidInput(f"the check job would be refused: {problems[0]}", "report this as a geotrain bug")
    world = job["spec"]["minAvailable"]
    for manifest in reversed(manifests):  # a check interrupted earlier left its objects: start clean
        backend._delete_object(manifest["kind"], manifest["metadata"]["name"])
    try:
        for manifest in manifests:
            backend._create(manifest)
        pods = _wait(backend, job_name(cluster.name), world, timeout, progress)
        logs = {p["metadata"]["name"]: ((p.get("spec") or {}).get("nodeName") or p["metadata"]["name"],
                                        _log(backend, p["metadata"]["name"])) for p in pods}
    finally:
        for manifest in reversed(manifests):
            with contextlib.suppress(BackendError):
                backend._delete_object(manifest["kind"], manifest["metadata"]["name"])
    nodes, links = results_from_logs(cluster.name, logs, world)
    missing = [] if len(pods) >= world else [f"{world - len(pods)} of {world} pods were never made (scheduling?)"]
    notes = missing + [NO_GPU_FACTS]
    verdict = cluster_verdict(cluster.name, "kubernetes", nodes, links, notes)
    if missing:
        verdict["ok"] = False
        verdict["why"].append(missing[0])
    return verdict
