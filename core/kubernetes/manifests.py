"""Kubernetes manifests of a workspace: a Volcano Job, its token Secret and config ConfigMap.

Pure functions (no cluster contact), so `--dry-run` and tests see exactly what deploy
submits. One task per group of alike nodes; the master task gives the rendezvous a
stable DNS name (`<job>-master-0.<job>`) through Volcano's svc plugin.
"""

from __future__ import annotations

import shlex
from typing import Any, Iterable

import yaml

from core.domain.wandb_server import SERVER_ENV, plain_server
from core.kubernetes.names import job_name, label_value, validate_image
from core.domain.records import Cluster, WorkspaceSpec
from core.state.secret_store import TOKEN_ENV
from core.kubernetes.datacenter_tasks import asked_datacenters, datacenter_tasks, place, uses_datacenters
from core.kubernetes.node_groups import GPU_RESOURCE, NodeGroup, dist_backend
from core.kubernetes.pod_resources import memory_resources, shm_volume
from core.kubernetes.recovery_manifests import add_recovery, render_checkpoint_claim
from core.kubernetes.network_policy import ELASTIC_STORE_PORT, WATCHER_LABEL, render_network_policy
from core.kubernetes.watcher_manifests import render_watcher, watcher_name
from core.kubernetes import elastic_manifests as elastic
from core.kubernetes.rendezvous_wait import WAIT_FOR_RDZV
from core.domain.recovery import RecoverySettings
from core.kubernetes import custom_command as custom, recipes_delivery as delivery
from core.kubernetes.manifest_text import manifests_yaml  # noqa: F401  (the backend and tests read it here)
from core.domain.images import ImageChoice, custom_image, image_for
from core.domain.architectures import ARCH_LABEL

API_VERSION = "batch.volcano.sh/v1alpha1"
# The image per node: core.domain.images (upstream PyTorch + recipes delivered by geotrain,
# core.kubernetes.recipes_delivery), or the team's own (`--image`, the cluster's `image`).
DEFAULT_QUEUE = "geotrain"
MAX_RETRY = 3  # Volcano's retries (RestartPod), before recovery.max_recoveries replaces it
MAX_RESTARTS = 3  # worker-group restarts by torchrun inside a pod
RDZV_PORT = 29400
RDZV_JOIN_TIMEOUT_S = 900
RDZV_WAIT_S = RDZV_JOIN_TIMEOUT_S  # a pod waits this long for the rendezvous before torchrun
# c10d rendezvous across a WAN: joins wait for image pulls on far nodes; store reads
# tolerate slow round trips.
RDZV_CONF = (f"join_timeout={RDZV_JOIN_TIMEOUT_S},read_timeout=120,last_call_timeout=30,"
             "close_timeout=60")
CONFIG_DIR = "/etc/geotrain"
WORK_DIR = "/workspace"  # an emptyDir: checkpoints outlive a container restart, so torchrun resumes
CONFIG_FILE = f"{CONFIG_DIR}/config.yaml"
POD_UID = 1000  # recipes/Dockerfile's `trainer`; on the upstream images a uid of its own (recipes_delivery)
# AMD pods' groups: the nodes' video/render gids (facts), the cluster's `amd_device_gids`, or Ubuntu's; geotrain's
# own clusters need none (their containerd gives devices the pod's gid: core.bootstrap.containerd.DEVICE_OWNERSHIP).
AMD_DEVICE_GIDS = (44, 109)
WORKSPACE_LABEL = "geotrain.io/workspace"
WORKSPACE_ANNOTATION = "geotrain.io/workspace-id"
MANAGED = {"app.kubernetes.io/managed-by": "geotrain"}
# Several TCP streams per peer fill a long fat pipe better than one.
WAN_NCCL_ENV = {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"}



def secret_name(workspace_id: str) -> str:
    return f"{job_name(workspace_id)}-tokens"


def config_map_name(workspace_id: str) -> str:
    return f"{job_name(workspace_id)}-config"


def token_env_names(spec: WorkspaceSpec) -> list[str]:
    """Env var names of the tokens a spec refers to (wandb -> WANDB_API_KEY …)."""
    return sorted(TOKEN_ENV.get(kind, kind.upper().replace("-", "_")) for kind in spec.tokens)


def _metadata(workspace_id: str, name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace,
            "labels": {WORKSPACE_LABEL: label_value(workspace_id), **MANAGED},
            "annotations": {WORKSPACE_ANNOTATION: workspace_id}}


def recipe_config(spec: WorkspaceSpec, backend: str | None = None,
                  cluster: Cluster | None = None) -> dict[str, Any]:
    """The recipe's YAML: the config core.workspaces resolved, with pod paths and backend.

    The collective backend is pinned when the job mixes vendors or CPUs (gloo): left on
    "auto", NVIDIA and AMD ranks would each pick their own NCCL/RCCL.
    """
    config = dict(spec.config) if spec.config else {
        "model": spec.model, "size": spec.size, "gradient_compression": spec.preset,
        "steps": spec.steps}
    config["out_dir"] = f"{WORK_DIR}/out"
    if backend:
        config["dist"] = {**(config.get("dist") or {}), "backend": backend}
    if cluster is not None:
        config = delivery.dataset_config(config, cluster.config, cluster.kind)
    return config


def render_config_map(workspace_id: str, spec: WorkspaceSpec, namespace: str,
                      backend: str | None = None, cluster: Cluster | None = None) -> dict[str, Any]:
    config = recipe_config(spec, backend, cluster)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _metadata(workspace_id, config_map_name(workspace_id), namespace),
            "data": {"config.yaml": yaml.safe_dump(config, sort_keys=False)}}


def render_secret(workspace_id: str, tokens: dict[str, str], namespace: str) -> dict[str, Any]:
    """The token Secret; `tokens` maps env var names to values."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _metadata(workspace_id, secret_name(workspace_id), namespace),
            "stringData": dict(sorted(tokens.items()))}


def _torchrun(job: str, nnodes: int, slots: int, is_host: bool, program: str) -> str:
    """`program`: shell words after torchrun's options (core.kubernetes.custom_command.torchrun_program)."""
    args = ["torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={slots}",
            f"--max-restarts={MAX_RESTARTS}", "--rdzv-backend=c10d",
            f"--rdzv-id={job}", f"--rdzv-conf={RDZV_CONF},is_host={int(is_host)}", "--monitor-interval=1"]
    # The endpoint and local address come from the environment at run time.
    return (shlex.join(args[:5]) + ' --rdzv-endpoint="$GEOTRAIN_RDZV_HOST:$GEOTRAIN_RDZV_PORT"'
            + ' --local-addr="$POD_IP" ' + shlex.join(args[5:]) + " " + program)


def _env(workspace_id: str, job: str, backend: str, group: NodeGroup,
         secret_keys: Iterable[str], settings: dict[str, str]) -> list[dict[str, Any]]:
    """The trainer's environment: geotrain's own values, `settings` (plain values the caller checked,
    such as WANDB_BASE_URL; never a secret), and each token by reference to the workspace's Secret."""
    plain = {**settings, "GEOTRAIN_WORKSPACE": workspace_id, "GEOTRAIN_RDZV_HOST": f"{job}-master-0.{job}",
             "GEOTRAIN_RDZV_WAIT_S": str(RDZV_WAIT_S), "GEOTRAIN_DIST_BACKEND": backend,
             "PYTHONUNBUFFERED": "1"}
    if group.vendor != "cpu":
        plain.update(WAN_NCCL_ENV)
    env: list[dict[str, Any]] = [{"name": "POD_IP",
                                  "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    env += [{"name": k, "value": v} for k, v in plain.items()]
    env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": f"{job}-tokens", "key": key}}}
            for key in sorted(secret_keys)]
    return env


def deployed_settings(job: dict[str, Any]) -> dict[str, str]:
    """The `settings` a rendered Job's trainers were given (_env), read back from the Job: a Job
    resubmitted by recovery logs where the first one did, whatever the environment of the process that
    recovers it says. A value that is not a plain address (edited in the cluster) is left out."""
    try:
        containers = [c for task in job["spec"]["tasks"] for c in task["template"]["spec"]["containers"]]
        found = [e.get("value") for c in containers for e in c.get("env") or [] if e.get("name") == SERVER_ENV]
    except (KeyError, TypeError, AttributeError):  # not the shape geotrain rendered: nothing to keep
        return {}
    value = found[0] if found else None
    return {SERVER_ENV: value} if isinstance(value, str) and plain_server(value) else {}


def _rdzv_env(is_host: bool) -> list[dict[str, Any]]:
    """What the pod's wait step needs: the port, and whether this pod hosts the store."""
    return [{"name": "GEOTRAIN_RDZV_PORT", "value": str(RDZV_PORT)},
            {"name": "GEOTRAIN_RDZV_IS_HOST", "value": str(int(is_host))}]


def _resources(spec: WorkspaceSpec, group: NodeGroup) -> dict[str, Any]:
    """CPU request, memory sized from the model (core.kubernetes.pod_resources), and the GPUs."""
    config = spec.config or {}
    memory = memory_resources(str(config.get("model") or spec.model), str(config.get("size") or spec.size),
                              group.slots, group.vendor)
    resources = {"requests": {"cpu": "1", **memory["requests"]}, "limits": dict(memory["limits"])}
    if group.vendor != "cpu":
        resources["limits"][GPU_RESOURCE[group.vendor]] = str(group.gpus)
    return resources


def _container_security_context() -> dict[str, Any]:
    """Pod Security "restricted" for the trainer (core.kubernetes.pod_security checks it): the image's
    own non-root user, no privilege escalation, no capabilities, the runtime's seccomp."""
    return {"runAsNonRoot": True, "runAsUser": POD_UID, "runAsGroup": POD_UID,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


def _harden_pod(pod_spec: dict[str, Any], cluster: Cluster, group: NodeGroup) -> None:
    """Pod-level settings: no service-account token (the trainer never calls the API), the
    same seccomp/non-root defaults for any container added later, and on AMD nodes the host
    groups that own /dev/kfd and /dev/dri (the device plugin does not chown them)."""
    pod_spec["automountServiceAccountToken"] = False
    context = pod_spec.setdefault("securityContext", {})
    context.update(runAsNonRoot=True, seccompProfile={"type": "RuntimeDefault"})
    if group.vendor == "amd":
        gids = group.device_gids or cluster.config.get("amd_device_gids") or AMD_DEVICE_GIDS
        context["supplementalGroups"] = sorted({*context.get("supplementalGroups", []), *map(int, gids)})


def _affinity(workspace_id: str, group: NodeGroup) -> dict[str, Any]:
    """One worker per node (anti-affinity), and only on the nodes of its group, of its architecture."""
    affinity: dict[str, Any] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {WORKSPACE_LABEL: label_value(workspace_id)}},
        "topologyKey": "kubernetes.io/hostname"}]}}
    if group.hostnames:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In", "values": list(group.hostnames)},
                {"key": ARCH_LABEL, "operator": "In", "values": [group.arch]}]}]}}
    return affinity


def pod_script(before_wait: str, job: str, nnodes: int, slots: int, is_host: bool,
               program: str = shlex.join(["-m", "recipes.train", "--config", CONFIG_FILE])) -> str:
    """The pod's shell: find python, run `before_wait` (the dependency install), wait for the
    rendezvous, exec torchrun on `program` (the recipe, or a custom-training command)."""
    find_python, wait = WAIT_FOR_RDZV.split("\n", 1)
    return f"{find_python}\n{before_wait}{wait}{_torchrun(job, nnodes, slots, is_host, program)}"


def _pod_template(workspace_id: str, job: str, choice: ImageChoice, cluster: Cluster, group: NodeGroup,
                  nnodes: int, backend: str, is_host: bool, secret_keys: Iterable[str],
                  ws_spec: WorkspaceSpec, source: dict[str, Any] | None, settings: dict[str, str],
                  workdir: dict[str, Any] | None = None, processes: int = 0) -> dict:
    """`processes`: the job's worker processes when it runs elastic (core.kubernetes.elastic_manifests), else 0."""
    image = choice.image
    env = _env(workspace_id, job, backend, group, secret_keys, settings) + _rdzv_env(is_host and not processes)
    if processes:  # the pod waits for its watcher's store, not for a master's rendezvous
        where = {"GEOTRAIN_RDZV_HOST": watcher_name(job), "GEOTRAIN_RDZV_PORT": str(elastic.ELASTIC_STORE_PORT),
                 "GEOTRAIN_RDZV_WHO": "the workspace's watcher (its quorum store)"}
        env = [e for e in env if e["name"] not in where] + [{"name": k, "value": v} for k, v in where.items()]
        env += elastic.elastic_env(job, processes, group.slots)
    container = {
        "name": "trainer",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "env": env,
        "ports": [{"name": "rdzv", "containerPort": RDZV_PORT}],
        "resources": _resources(ws_spec, group),
        "securityContext": _container_security_context(),
        "workingDir": WORK_DIR,
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                         {"name": "work", "mountPath": WORK_DIR},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "OnFailure",
        "containers": [container],
        "affinity": _affinity(workspace_id, group),
        "volumes": [{"name": "config", "configMap": {"name": f"{job}-config"}},
                    {"name": "work", "emptyDir": {}},
                    shm_volume(group.slots)],
    }
    before = delivery.add_delivery(spec, container, image, choice.delivered, cluster.config,
                                   cluster.kind, source)
    custom.add_command(spec, container, ws_spec, workdir, f"{WORK_DIR}/out")
    program = custom.torchrun_program(ws_spec, CONFIG_FILE)
    script = (elastic.elastic_pod_script(*WAIT_FOR_RDZV.split("\n", 1), before, program) if processes
              else pod_script(before, job, nnodes, group.slots, is_host, program))
    container["command"] = ["/bin/sh", "-c", script]
    _harden_pod(spec, cluster, group)
    runtime_class = (cluster.config.get("runtime_classes") or {}).get(group.vendor)
    if runtime_class is None and group.vendor == "nvidia" and cluster.kind == "geotrain":
        runtime_class = "nvidia"  # made by k3s (manifests/runtimes.yaml); handler: our containerd's
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    labels = {WORKSPACE_LABEL: label_value(workspace_id), **MANAGED}
    return {"metadata": {"labels": labels}, "spec": spec}


def _task_names(placed: list[tuple[NodeGroup, int]]) -> list[str]:
    if len(placed) == 1:
        return ["worker"]
    names: list[str] = []
    for group, _ in placed:
        name = f"worker-{group.vendor}"
        same = sum(n.startswith(name) for n in names)
        names.append(f"{name}{same + 1}" if same else name)
    return names


def _node_tasks(placed: list[tuple[NodeGroup, int]], template) -> list[dict[str, Any]]:
    """A master task and one worker task per node group (no datacenters known)."""
    tasks = [{"name": "master", "replicas": 1, "minAvailable": 1,
              "template": template(placed[0][0], True),
              "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}]}]
    for (group, count), name in zip(placed, _task_names(placed)):
        count -= 1 if group is placed[0][0] else 0
        if count:
            tasks.append({"name": name, "replicas": count, "minAvailable": count,
                          "template": template(group, False)})
    return tasks


def group_image(spec: WorkspaceSpec, cluster: Cluster, group: NodeGroup) -> ImageChoice:
    """The image of one node group, for its vendor and architecture (core.domain.images), a custom one validated."""
    custom = custom_image(spec.image, cluster.config)
    return image_for(group.vendor, validate_image(custom) if custom else None, group.arch)


def _source(workspace_id: str, spec: WorkspaceSpec, cluster: Cluster, placed, namespace: str):
    """The recipes ConfigMaps and their volume when a group runs the upstream image, else ([], None)."""
    if not any(group_image(spec, cluster, g).delivered for g, _ in placed):
        return [], None
    files = delivery.recipes_files()
    files = custom.with_loop_package(files) if custom.is_custom(spec) else files
    maps = delivery.render_source_maps(job_name(workspace_id), _metadata(workspace_id, "", namespace), files)
    return maps, delivery.source_volume(maps, files)


def render_volcano_job(workspace_id: str, spec: WorkspaceSpec, cluster: Cluster,
                       groups: list[NodeGroup], namespace: str = "default",
                       secret_keys: Iterable[str] = (),
                       source: dict[str, Any] | None = None,
                       settings: dict[str, str] | None = None, workdir: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Volcano Job: a master task and one worker task per node group, gang-scheduled.
    `source`: the recipes volume (render_manifests passes the one of its ConfigMaps);
    `settings`: plain env values for the trainer (checked by the caller; never a secret)."""
    placed = place(groups, spec.workers, cluster.name, asked_datacenters(spec.config))
    if source is None:
        source = _source(workspace_id, spec, cluster, placed, namespace)[1]
    job, backend, keys = job_name(workspace_id), dist_backend(placed), list(secret_keys)
    processes = elastic_processes(spec, placed)
    template = lambda group, is_host: _pod_template(  # noqa: E731
        workspace_id, job, group_image(spec, cluster, group), cluster, group, spec.workers,
        backend, is_host, keys, spec, source, dict(settings or {}), workdir, processes)
    tasks = (datacenter_tasks(placed, template, asked_datacenters(spec.config)) if uses_datacenters(placed)
             else _node_tasks(placed, template))
    manifest = add_recovery({
        "apiVersion": API_VERSION, "kind": "Job",
        "metadata": _metadata(workspace_id, job, namespace),
        "spec": {
            "schedulerName": "volcano",
            "queue": cluster.config.get("queue") or DEFAULT_QUEUE,
            "minAvailable": spec.workers,
            "maxRetry": MAX_RETRY,
            "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
            "tasks": tasks,  # lifecycle policies: core.kubernetes.watcher_manifests.pod_policies
        },
    }, spec, cluster)
    if processes:
        elastic.elastic_job(manifest)
    return manifest


def elastic_processes(spec: WorkspaceSpec, placed) -> int:
    """The job's worker processes when it runs elastic DiLoCo (core.kubernetes.elastic_manifests), else 0."""
    processes = sum(group.slots * count for group, count in placed)
    return processes if elastic.is_elastic(spec, processes) else 0


def render_manifests(workspace_id: str, spec: WorkspaceSpec, cluster: Cluster,
                     groups: list[NodeGroup], namespace: str,
                     tokens: dict[str, str], settings: dict[str, str] | None = None,
                     store_token: str = elastic.HIDDEN) -> list[dict[str, Any]]:
    """ConfigMap, the recipes ConfigMaps (upstream image), Secret (when there are tokens), the
    checkpoint claim (when the workspace has its own), NetworkPolicy, the watcher's objects
    (core.kubernetes.watcher_manifests) and Job, in the order they are created.
    `settings`: plain env values for the trainer (render_volcano_job); `store_token`: an elastic
    workspace's store key (core.kubernetes.elastic_manifests; made at deploy, HIDDEN in a plan)."""
    placed = place(groups, spec.workers, cluster.name, asked_datacenters(spec.config))
    maps, source = _source(workspace_id, spec, cluster, placed, namespace)
    code, workdir = custom.workdir_maps(job_name(workspace_id), _metadata(workspace_id, "", namespace), spec)
    maps += code
    job = render_volcano_job(workspace_id, spec, cluster, groups, namespace, tokens, source, settings, workdir)
    backend = dist_backend(placed)
    out = [render_config_map(workspace_id, spec, namespace, backend, cluster)] + maps
    if tokens:
        out.append(render_secret(workspace_id, tokens, namespace))
    metadata = _metadata(workspace_id, "", namespace)
    claim = render_checkpoint_claim(job["metadata"]["name"], spec, cluster, metadata)
    fence = render_network_policy(job["metadata"]["name"], metadata, {WORKSPACE_LABEL: label_value(workspace_id)},
                                  (RDZV_PORT, ELASTIC_STORE_PORT))  # before the Job: no pod starts unfenced
    watcher = render_watcher(job, metadata, {WATCHER_LABEL: label_value(workspace_id)},
                             RecoverySettings.from_dict(spec.recovery).max_recoveries,
                             group_image(spec, cluster, placed[0][0]).image, source)
    # the watcher runs the master group's image: on a node of that group's CPU (an arm64 GH200 cannot run amd64)
    watcher[-1]["spec"]["template"]["spec"]["nodeSelector"] = {ARCH_LABEL: placed[0][0].arch}
    store = []
    if elastic_processes(spec, placed):  # the watcher holds the quorum store: its token, Service and fence
        store = elastic.render_store_objects(job["metadata"]["name"], metadata,
                                             {WORKSPACE_LABEL: label_value(workspace_id)}, store_token)
        elastic.watcher_store(watcher[-1], job["metadata"]["name"])
    return out + ([claim] if claim else []) + [fence, *store, *watcher, job]
