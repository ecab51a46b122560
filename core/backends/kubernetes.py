"""Workspaces on a Kubernetes cluster: one Volcano Job (+ Secret + ConfigMap) each.

Everything is rendered and checked before the cluster is contacted, so bad input
submits nothing; a failure half-way through deploy removes what it had created.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.backends import node_files
from core.backends.base import Backend, LaunchPlan, WorkerState, WorkspaceState
from core.backends.kubernetes_drilldown import PodDrilldown
from core.backends.kubernetes_recovery import JobRecovery
from core.backends.kubernetes_notify import WatcherNotify
from core.backends.kubernetes_utilization import PodUtilization
from core.errors import BackendError, InvalidInput
from core.kubernetes.names import job_name, label_value
from core.kubernetes.recipes_delivery import source_selector
from core.kubernetes.client import (NETWORK_ERRORS, REQUEST_TIMEOUT, SCHEDULING_GROUP,
                              SCHEDULING_VERSION, VOLCANO_GROUP, VOLCANO_VERSION, ApiError,
                              api_errors, check_volcano, load_api_client)
from core.kubernetes.manifests import (WORKSPACE_ANNOTATION, config_map_name,
                            manifests_yaml, render_manifests, secret_name, token_env_names)
from core.domain.records import Cluster, Status, WorkspaceSpec
from core.kubernetes.node_groups import NodeGroup, cluster_groups
from core.kubernetes.registry_auth import pull_secret_name, split_registry_auth, with_pull_secret
from core.kubernetes.recovery_manifests import claim_name, kept_after_delete
from core.kubernetes.network_policy import policy_name
from core.kubernetes.watcher_manifests import history_name, watcher_name
from core.kubernetes.elastic_manifests import HIDDEN, new_token, store_secret_name
from core.state.secret_store import SecretStore, redact
from core.domain.wandb_server import server_env
from core.kubernetes.pod_security import POD_SECURITY_KEY, job_violations
from core.kubernetes.pod_logs import CONTAINER, JobLogs, container_status, progress_row, read_json
from core.kubernetes.admission import admission_errors
from core.kubernetes.failed_pods import keep_failed_pods
from core.kubernetes.pod_phases import (JOB_PHASES, MAX_DETAIL, POD_PHASES, events_by_pod, init_log_wanted,
                                        master_exit_code, pod_phase, unschedulable_message, worker_detail)
from core.domain.run_events import combine, one_line

METRICS_TAIL_LINES, METRICS_TAIL_BYTES = 2000, 4 * 1024 * 1024  # rank 0's progress lines read per refresh
PHASE_TAIL_LINES = 200  # enough of a starting pod's log to find its last data/rendezvous event
PHASE_TAIL_BYTES = 256 * 1024  # ... and no more bytes of it, however long a worker's lines are
EVENT_LIMIT = 1000  # pod events read per poll: a busy namespace's list stays bounded
# The kinds a workspace creates besides its Volcano Job: typed client and method noun.
TYPED_KINDS = {"Secret": (client.CoreV1Api, "secret"), "ConfigMap": (client.CoreV1Api, "config_map"),
               "PersistentVolumeClaim": (client.CoreV1Api, "persistent_volume_claim"),
               "NetworkPolicy": (client.NetworkingV1Api, "network_policy"),
               "ServiceAccount": (client.CoreV1Api, "service_account"), "Role": (client.RbacAuthorizationV1Api, "role"),
               "RoleBinding": (client.RbacAuthorizationV1Api, "role_binding"), "Deployment": (client.AppsV1Api, "deployment"),
               "Service": (client.CoreV1Api, "service")}
# The watcher's objects (core.kubernetes.watcher_manifests; its store's Service and fence:
# core.kubernetes.elastic_manifests), all named <job>-watcher, deleted after the Job in this order.
WATCHER_KINDS = ("Deployment", "Service", "NetworkPolicy", "RoleBinding", "Role", "ServiceAccount")


class KubernetesBackend(PodDrilldown, PodUtilization, JobRecovery, WatcherNotify, Backend):
    """Runs workspaces as Volcano jobs in the cluster's namespace (default `default`)."""

    def __init__(self, cluster: Cluster, log_poll_s: float = 1.0,
                 log_read_timeout_s: float = 300.0) -> None:
        self.cluster = cluster
        self.namespace = cluster.config.get("namespace") or "default"
        self.log_poll_s, self.log_read_timeout_s = log_poll_s, log_read_timeout_s
        self._api: client.ApiClient | None = None
        self._rank0_pod: dict[str, str] = {}  # workspace id -> the pod whose log showed rank 0
        self._training: set[tuple[str, int]] = set()  # (pod uid, restarts) seen training: no more log reads

    # helpers -------------------------------------------------------------------
    @property
    def api(self) -> client.ApiClient:
        if self._api is None:
            self._api = load_api_client(self.cluster)
        return self._api

    def _errors(self, action: str, volcano: bool = False):
        return api_errors(self.cluster, action, self.namespace, volcano)

    def _groups(self) -> list[NodeGroup]:
        if self.cluster.config.get("node_groups") or not self.cluster.nodes:
            return cluster_groups(self.cluster)
        from core.state.node_records import get_node
        from core.state.store import Store

        store = Store()
        return cluster_groups(self.cluster, [get_node(store, n) for n in self.cluster.nodes])

    def _manifests(self, workspace_id: str, spec: WorkspaceSpec, tokens: dict[str, str],
                   settings: dict[str, str] | None = None, store_token: str = HIDDEN) -> list[dict[str, Any]]:
        """`settings`: the trainer's plain env values; None: a new deploy's, where a workspace that logs
        to W&B logs where its key was checked (this machine's WANDB_BASE_URL). `store_token`: the elastic
        store's key, made by deploy (never stored: it lives in the workspace's Secret only)."""
        if settings is None:
            settings = server_env() if "wandb" in spec.tokens else {}
        tokens, registry = split_registry_auth(tokens)  # a pull secret's, never the trainer's
        manifests = render_manifests(workspace_id, spec, self.cluster, self._groups(),
                                     self.namespace, tokens, settings, store_token)
        manifests = with_pull_secret(manifests, workspace_id, spec.image or "", registry)
        keep_failed_pods(manifests[-1], spec.recovery)
        problems = admission_errors(manifests[-1])
        if problems:
            raise BackendError(f"the rendered Volcano job would be refused: {problems[0]}",
                               "this is a geotrain bug; please report it with the spec")
        self._check_pod_security(manifests[-1])
        return manifests

    def _check_pod_security(self, job: dict[str, Any]) -> None:
        """Refuse here what the namespace's Pod Security admission would refuse silently
        (the job would sit Pending); the level was read at registration."""
        level = self.cluster.config.get(POD_SECURITY_KEY)
        refused = job_violations(job, level) if level and level != "privileged" else []
        if refused:
            raise InvalidInput(f"namespace {self.namespace} enforces Pod Security {level!r}, which "
                               f"refuses these pods ({refused[0]})",
                               "keep checkpoints on a claim (recovery.pvc), not a node directory")

    # Backend -------------------------------------------------------------------
    def plan(self, workspace_id: str, spec: WorkspaceSpec) -> LaunchPlan:
        tokens = {name: "<hidden>" for name in token_env_names(spec)}
        manifests = self._manifests(workspace_id, spec, tokens)
        head = (f"# Volcano job {job_name(workspace_id)} on cluster {self.cluster.name!r}, "
                f"namespace {self.namespace!r} (Secret values are never shown)\n")
        return LaunchPlan(description=head + manifests_yaml(manifests),
                          config_yaml=manifests[0]["data"]["config.yaml"])

    def deploy(self, workspace_id: str, spec: WorkspaceSpec, secret_refs: dict[str, str]) -> str:
        manifests = self._manifests(workspace_id, spec, SecretStore().tokens(secret_refs), store_token=new_token())
        check_volcano(self.cluster, self.api)
        created: list[dict[str, Any]] = []
        try:
            for manifest in manifests:
                self._create(manifest)
                created.append(manifest)
        except BackendError:
            for manifest in reversed(created):  # best effort: the first error is the news
                with contextlib.suppress(BackendError):
                    self._delete_object(manifest["kind"], manifest["metadata"]["name"])
            raise
        return f"{self.namespace}/{job_name(workspace_id)}"

    def _typed(self, verb: str, kind: str):
        """The typed client's `<verb>_namespaced_<kind>` method for a kind other than the Volcano Job."""
        api, noun = TYPED_KINDS[kind]
        return getattr(api(self.api), f"{verb}_namespaced_{noun}")

    def _create(self, manifest: dict[str, Any]) -> None:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        with self._errors(f"creating {kind} {name}", volcano=kind == "Job"):
            if kind == "Job":
                client.CustomObjectsApi(self.api).create_namespaced_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, self.namespace, "jobs", manifest,
                    _request_timeout=REQUEST_TIMEOUT)
            else:
                self._typed("create", kind)(self.namespace, manifest, _request_timeout=REQUEST_TIMEOUT)

    def _delete_object(self, kind: str, name: str) -> None:
        """Delete one object; one that is already gone is fine."""
        body = client.V1DeleteOptions(propagation_policy="Background")
        try:
            with self._errors(f"deleting {kind} {name}", volcano=False):
                if kind == "Job":
                    client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
                        VOLCANO_GROUP, VOLCANO_VERSION, self.namespace, "jobs", name, body=body,
                        _request_timeout=REQUEST_TIMEOUT)
                else:
                    self._typed("delete", kind)(name, self.namespace, body=body, _request_timeout=REQUEST_TIMEOUT)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def delete(self, workspace_id: str) -> None:
        self._delete_object("Job", job_name(workspace_id))
        for kind in WATCHER_KINDS:
            self._delete_object(kind, watcher_name(job_name(workspace_id)))
        self._delete_object("ConfigMap", history_name(job_name(workspace_id)))
        self._delete_object("Secret", secret_name(workspace_id))
        self._delete_object("Secret", store_secret_name(job_name(workspace_id)))
        self.clear_notify(workspace_id)  # the webhook's address (core.kubernetes.notify_secret)
        self._delete_object("Secret", pull_secret_name(workspace_id))
        self._delete_object("ConfigMap", config_map_name(workspace_id))
        self._delete_source_maps(workspace_id)
        # The workspace's own checkpoint claim (none when it used recovery.pvc or a node
        # directory: then this is a 404, which is fine). Kubernetes keeps it until the pods are gone.
        self._delete_object("PersistentVolumeClaim", claim_name(job_name(workspace_id)))
        self._delete_object("NetworkPolicy", policy_name(job_name(workspace_id)))  # last, after the Job

    def remove_node_files(self, workspace_id: str, spec: WorkspaceSpec, remove_dirs) -> None:
        """Its checkpoint directory on the nodes, once its pods are gone (core.backends.node_files)."""
        node_files.remove(self.cluster, workspace_id, job_name(workspace_id), spec,
                          lambda: bool(self._pods(workspace_id)), remove_dirs)

    def kept_after_delete(self, workspace_id: str, spec: WorkspaceSpec) -> str:
        return kept_after_delete(job_name(workspace_id), spec, self.cluster)

    def _delete_source_maps(self, workspace_id: str) -> None:
        """The recipes ConfigMaps (core.kubernetes.recipes_delivery), found by label: their
        number depends on the recipes of the geotrain that deployed the workspace."""
        with self._errors("listing the recipes ConfigMaps"):
            found = client.CoreV1Api(self.api).list_namespaced_config_map(
                self.namespace, label_selector=source_selector(label_value(workspace_id)),
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        for item in read_json(found).get("items", []):
            self._delete_object("ConfigMap", item["metadata"]["name"])

    def list(self) -> list[str]:
        with self._errors("listing Volcano jobs", volcano=True):
            jobs = client.CustomObjectsApi(self.api).list_namespaced_custom_object(
                VOLCANO_GROUP, VOLCANO_VERSION, self.namespace, "jobs",
                label_selector="app.kubernetes.io/managed-by=geotrain",
                _request_timeout=REQUEST_TIMEOUT)
        return sorted(j["metadata"].get("annotations", {}).get(WORKSPACE_ANNOTATION)
                      or j["metadata"]["name"] for j in jobs.get("items", []))

    # status --------------------------------------------------------------------
    def _job(self, workspace_id: str) -> dict[str, Any] | None:
        try:
            with self._errors("reading the Volcano job", volcano=False):
                return client.CustomObjectsApi(self.api).get_namespaced_custom_object(
                    VOLCANO_GROUP, VOLCANO_VERSION, self.namespace, "jobs",
                    job_name(workspace_id), _request_timeout=REQUEST_TIMEOUT)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _history_map(self, workspace_id: str) -> dict[str, Any] | None:
        """The watcher's history ConfigMap (core.kubernetes.watcher_history); None when there is none."""
        try:
            with self._errors("reading the watcher's history"):
                return read_json(client.CoreV1Api(self.api).read_namespaced_config_map(
                    history_name(job_name(workspace_id)), self.namespace, _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT))
        except ApiError as exc:
            if exc.status == 404:  # deployed before the watcher, or deleted
                return None
            raise

    def _pods(self, workspace_id: str) -> list[dict[str, Any]]:
        with self._errors("listing pods"):
            response = client.CoreV1Api(self.api).list_namespaced_pod(
                self.namespace, label_selector=f"volcano.sh/job-name={job_name(workspace_id)}",
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        return sorted(read_json(response).get("items", []), key=lambda p: p["metadata"]["name"])

    def _gang_reason(self, job: dict[str, Any]) -> str:
        """The scheduler's word on a pending job, from its PodGroup (best effort)."""
        try:
            groups = client.CustomObjectsApi(self.api).list_namespaced_custom_object(
                SCHEDULING_GROUP, SCHEDULING_VERSION, self.namespace, "podgroups",
                _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, *NETWORK_ERRORS):  # the reason is a nicety; status goes on
            return ""
        return unschedulable_message(job, groups.get("items", []))

    def status(self, workspace_id: str) -> WorkspaceState:
        job = self._job(workspace_id)
        if job is None:
            return WorkspaceState(Status.DELETED.value, reason=f"no Volcano job "
                                  f"{job_name(workspace_id)} in namespace {self.namespace}")
        state = (job.get("status") or {}).get("state") or {}
        status = JOB_PHASES.get(state.get("phase", "Pending"), Status.PENDING)
        pods = self._pods(workspace_id)
        workers = [self._worker(workspace_id, pod) for pod in pods]
        reason = one_line(state.get("message") or state.get("reason") or "")[:MAX_DETAIL]  # Volcano's words
        failed = ""  # a failed pod, named while Volcano or the recovery check restarts the job
        if status in (Status.PENDING, Status.RUNNING) and pods:
            derived, workers = self._phases(workspace_id, pods, workers)
            if derived[0] != Status.PENDING.value:
                return WorkspaceState(derived[0], reason=derived[1], workers=workers,
                                      exit_code=master_exit_code(job_name(workspace_id), pods))
            failed = derived[1]
        if status is Status.PENDING:
            unschedulable = next((w.detail for w in workers if "unschedulable" in w.detail.lower()), "")
            reason = self._gang_reason(job) or unschedulable or reason or "waiting for the Volcano scheduler"
        reason = "; ".join(part for part in (failed, reason) if part)
        return WorkspaceState(status.value, reason=reason, workers=workers,
                              exit_code=master_exit_code(job_name(workspace_id), pods))

    def _phases(self, workspace_id: str, pods: list[dict[str, Any]],
                workers: list[WorkerState]) -> tuple[tuple[str, str], list[WorkerState]]:
        """The workspace's state from its pods' image pulls, events and log lines."""
        events = events_by_pod(self._events())
        phases: dict[str, tuple[str, str]] = {}
        now = time.time()
        for pod, worker in zip(pods, workers):
            name = pod["metadata"]["name"]
            seen = (pod["metadata"].get("uid", ""), int(container_status(pod).get("restartCount") or 0))
            running = (pod.get("status") or {}).get("phase") == "Running"
            lines = None
            if running and seen not in self._training:
                lines = self._log_tail(name)
            wanted = init_log_wanted(pod)
            init_lines = self._log_tail(name, *wanted) if wanted else None
            status, detail = pod_phase(pod, events.get(name, []), lines, now, init_lines)
            if running and seen in self._training:
                status = Status.RUNNING.value
            if status == Status.RUNNING.value:
                self._training.add(seen)
            phases[worker.name] = (status, detail)
            if status != Status.FAILED.value and detail:  # a failed pod's row keeps worker_detail's words
                worker.detail = worker_detail(pod, detail)
            worker.status = status
        return combine(phases, [w.name for w in workers]), workers

    def _events(self) -> list[dict[str, Any]]:
        """The namespace's pod events (best effort: without them pulls show as PENDING)."""
        try:
            response = client.CoreV1Api(self.api).list_namespaced_event(
                self.namespace, field_selector="involvedObject.kind=Pod", limit=EVENT_LIMIT,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, *NETWORK_ERRORS):
            return []
        return read_json(response).get("items", [])

    def _log_tail(self, pod_name: str, container: str = CONTAINER, previous: bool = False, tail_lines: int = PHASE_TAIL_LINES, limit_bytes: int = PHASE_TAIL_BYTES) -> list[str] | None:
        try:
            response = client.CoreV1Api(self.api).read_namespaced_pod_log(
                pod_name, self.namespace, container=container, previous=previous, tail_lines=tail_lines,
                limit_bytes=limit_bytes, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, *NETWORK_ERRORS):
            return None
        return response.data.decode("utf-8", "replace").splitlines()

    def _worker(self, workspace_id: str, pod: dict[str, Any]) -> WorkerState:
        phase = (pod.get("status") or {}).get("phase", "Pending")
        return WorkerState(self._label(workspace_id, pod["metadata"]["name"]),
                           POD_PHASES.get(phase, Status.PENDING).value, worker_detail(pod))

    def metrics(self, workspace_id: str) -> list[dict]:
        """Progress rows from rank 0's recent log lines (metrics.jsonl stays in the pod).

        c10d rendezvous gives rank 0 to whichever agent it orders first, not necessarily
        master-0, so rank 0's pod is the one whose lines say `[rank 0]`: the pod found last
        time is read first, then master-0, then the others (a restart may move rank 0)."""
        remembered = self._rank0_pod.get(workspace_id)
        master = f"{job_name(workspace_id)}-master-0"
        names = sorted((p["metadata"]["name"] for p in self._pods(workspace_id)),
                       key=lambda name: (name != remembered, name != master, name))
        for name in names:
            rows = self._progress_rows(name)
            if rows:
                self._rank0_pod[workspace_id] = name
                return rows
        return []

    def _progress_rows(self, pod_name: str) -> list[dict]:
        try:
            with self._errors(f"reading the log of {pod_name}"):
                response = client.CoreV1Api(self.api).read_namespaced_pod_log(
                    pod_name, self.namespace, container=CONTAINER, tail_lines=METRICS_TAIL_LINES,
                    limit_bytes=METRICS_TAIL_BYTES, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiError:
            return []  # not started yet, or gone
        text = response.data.decode("utf-8", "replace")
        return [row for row in map(progress_row, text.splitlines()) if row is not None]

    # logs ----------------------------------------------------------------------
    @staticmethod
    def _label(workspace_id: str, pod_name: str) -> str:
        return pod_name.removeprefix(job_name(workspace_id) + "-")

    def logs(self, workspace_id: str, follow: bool = False) -> Iterator[tuple[str, str]]:
        def finished() -> bool:
            return Status(self.status(workspace_id).status).terminal

        reader = JobLogs(client.CoreV1Api(self.api), self.namespace,
                         list_pods=lambda: self._pods(workspace_id),
                         label=lambda name: self._label(workspace_id, name),
                         finished=finished, poll_s=self.log_poll_s,
                         read_timeout_s=self.log_read_timeout_s, request_timeout=REQUEST_TIMEOUT)
        secrets = SecretStore().values(f"{workspace_id}/")  # as the local supervisor does its workers'
        with self._errors("reading pod logs"):
            for worker, line in (reader.follow() if follow else reader.snapshot()):
                yield worker, redact(line, secrets)
