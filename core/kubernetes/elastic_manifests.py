"""Elastic DiLoCo on Kubernetes (issue 40): the trainers meet in the quorum store their watcher
holds (recipes.elastic_store, in recipes/watcher.py's process) instead of torchrun's static group.

What a workspace in elastic mode adds to its manifests (render_manifests calls these):
- a Secret `<job>-store-token`: 32 random bytes (hex) made by core at deploy, the key of the
  store's HMAC; it lives only there. `--dry-run` and the plan render HIDDEN in its place, the DB
  and the events never see it, and the pods read it from a file (never argv or an env value);
- a Service `<job>-watcher` on ELASTIC_STORE_PORT selecting the watcher pod: the store's stable
  name for the trainers (`geotrain-store://<job>-watcher:29401`);
- a NetworkPolicy `<job>-watcher` selecting the watcher pod that admits only the job's own pods,
  on that port (the job's own policy, core.kubernetes.network_policy, fences the trainers);
- the watcher's Deployment mounts the token and serves the store (watcher_store);
- every trainer pod runs recipes.train directly (elastic_pod_script), not under torchrun: a lost
  pod is one worker fewer in the quorum until Volcano makes it again, never a re-formed group.

Ranks: RANK = the task's first rank (GEOTRAIN_RANK_OFFSET, set per task in job order) +
VC_TASK_INDEX x the pod's processes + the process's local rank. Volcano's env plugin sets
VC_TASK_INDEX on every container from the pod's name `<job>-<task>-<index>` (volcano v1.10.0 and
v1.11.0, pkg/controllers/job/plugins/env/env.go OnPodCreate, const.go TaskIndex; helpers.go
GetPodIndexUnderTask: the oldest Volcano core.bootstrap.versions pins for a Kubernetes release is
v1.10.0), and a pod Volcano makes again keeps its name (job_controller_actions.go syncJob), so a
replacement takes back its rank and rejoins as a joiner (recipes.elastic).

A process that fails ends its pod's container (its siblings are stopped with it): kubelet starts
the container again in place under restartPolicy OnFailure, with exponential back-off capped at
five minutes (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#restart-policy);
a pod that is lost whole (its node) is the watcher's to replace.
"""

from __future__ import annotations

import secrets
from typing import Any

from core.domain.recipe_catalog import presets
from core.domain.records import WorkspaceSpec
from core.domain.recovery import RecoverySettings
from core.kubernetes.network_policy import ELASTIC_STORE_PORT, WATCHER_LABEL
from core.kubernetes.watcher_manifests import WATCHER_CONTAINER, WATCHER_UID, watcher_name

HIDDEN = "<hidden>"  # the token's place in a plan or --dry-run (core.kubernetes.manifest_text hides it too)
TOKEN_KEY = "token"
TOKEN_DIR = "/var/run/geotrain/store"
TOKEN_FILE = f"{TOKEN_DIR}/{TOKEN_KEY}"
TOKEN_FILE_ENV = "GEOTRAIN_ELASTIC_STORE_TOKEN_FILE"
STORE_ENV = "GEOTRAIN_ELASTIC_STORE"
RANK_OFFSET_ENV = "GEOTRAIN_RANK_OFFSET"
# 0400: the owner alone. The pods run as uid 1000 and the file is root's, so each pod also has
# fsGroup 1000: kubelet gives a Secret volume's files that group and adds the group's read bit
# (kubernetes pkg/volume/volume_linux.go SetVolumeOwnership: roMask 0440, called by the secret
# volume's SetUpAt), so the file is 0440 root:1000, readable by the pod's user and nobody else.
TOKEN_MODE = 0o400
ELASTIC_MARK = "# geotrain: elastic workers (core.kubernetes.elastic_manifests)"

# The pod's first rank, then the pod's processes (one per GPU) started and watched: the first
# that fails stops its siblings and ends the container with its exit code.
ELASTIC_LAUNCH = ELASTIC_MARK + """
[ -n "${{VC_TASK_INDEX:-}}" ] || {{ echo "geotrain: VC_TASK_INDEX is unset: the job needs Volcano's env plugin" >&2; exit 1; }}
export RANK=$(({offset_env} + VC_TASK_INDEX * LOCAL_WORLD_SIZE))
exec "$py" - {program} <<'GEOTRAIN_WORKERS'
import os, signal, subprocess, sys
n, first, dc = int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ["RANK"]), os.environ.get("GEOTRAIN_DC_RANK")
procs = []
for i in range(n):
    env = dict(os.environ, LOCAL_RANK=str(i), RANK=str(first + i))
    if dc is not None:
        env["GEOTRAIN_DC_RANK"] = str(int(dc) + i)
    procs.append(subprocess.Popen([sys.executable, *sys.argv[1:]], env=env, stdin=subprocess.DEVNULL))
def stop(*_):
    for p in procs:
        if p.poll() is None:
            p.terminate()
signal.signal(signal.SIGTERM, stop)
code, left = 0, set(p.pid for p in procs)
while left:
    pid, status = os.wait()
    if pid not in left:
        continue
    left.discard(pid)
    failed = os.waitstatus_to_exitcode(status)
    if failed and not code:
        code = failed if failed > 0 else 128 - failed
        print(f"geotrain: worker process {{pid}} ended with {{failed}}: stopping this pod's others", flush=True)
        stop()
sys.exit(code)
GEOTRAIN_WORKERS
"""


def store_secret_name(job: str) -> str:
    return f"{job}-store-token"


def store_url(job: str) -> str:
    """The trainers' GEOTRAIN_ELASTIC_STORE: the watcher's Service, by its short name (the pods'
    DNS search list holds `<namespace>.svc.<cluster domain>` first)."""
    return f"geotrain-store://{watcher_name(job)}:{ELASTIC_STORE_PORT}"


def new_token() -> str:
    """The store's key for one deploy: 32 random bytes, as hex (recipes.elastic_store.read_token)."""
    return secrets.token_hex(32)


def algorithm(spec: WorkspaceSpec) -> str:
    preset = (spec.config or {}).get("gradient_compression") or spec.preset
    return str(presets().get(preset, {}).get("algorithm", "ddp"))


def is_elastic(spec: WorkspaceSpec, processes: int) -> bool:
    """As the local cluster decides (core.backends.local.backend._mode): DiLoCo with several
    worker processes and `recovery.elastic` (default true); a custom-training command runs its
    own loop under torchrun. Unlike the local cluster, several datacenters stay elastic: that is
    the point here (a datacenter lost lets the others train on)."""
    if spec.template == "custom-training":
        return False
    return RecoverySettings.from_dict(spec.recovery).is_elastic(algorithm(spec), processes)


def elastic_env(job: str, processes: int, slots: int) -> list[dict[str, Any]]:
    """The trainer's elastic settings (the timeouts come with the recovery settings)."""
    env = {STORE_ENV: store_url(job), TOKEN_FILE_ENV: TOKEN_FILE, "GEOTRAIN_ELASTIC_GEN": "0",
           "WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(slots)}
    return [{"name": k, "value": v} for k, v in env.items()]


def elastic_pod_script(find_python: str, wait: str, before_wait: str, program: str) -> str:
    """The pod's shell in elastic mode: find python, `before_wait` (the dependency install), `wait` (the
    bounded wait for the store's port: core.kubernetes.rendezvous_wait), the pod's processes."""
    wait = wait.removesuffix("exec ")  # WAIT_FOR_RDZV ends by exec'ing torchrun: here the launcher follows
    return f"{find_python}\n{before_wait}{wait}" + ELASTIC_LAUNCH.format(offset_env=RANK_OFFSET_ENV, program=program)


def token_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount) of the store token, read-only, 0400."""
    volume = {"name": "store-token", "secret": {"secretName": "", "defaultMode": TOKEN_MODE,
                                                "items": [{"key": TOKEN_KEY, "path": TOKEN_KEY}]}}
    return volume, {"name": "store-token", "mountPath": TOKEN_DIR, "readOnly": True}


def _mount_token(pod_spec: dict[str, Any], container: dict[str, Any], job: str, uid: int) -> None:
    volume, mount = token_volume()
    volume["secret"]["secretName"] = store_secret_name(job)
    pod_spec.setdefault("volumes", []).append(volume)
    container.setdefault("volumeMounts", []).append(mount)
    context = pod_spec.setdefault("securityContext", {})
    context.setdefault("fsGroup", uid)
    # without it kubelet re-owns every file of every volume (a checkpoint claim too) at each pod start
    # (Kubernetes docs, "Configure volume permission and ownership change policy for Pods")
    context.setdefault("fsGroupChangePolicy", "OnRootMismatch")


def elastic_job(job_manifest: dict[str, Any]) -> None:
    """Each task's first global rank (job order, as recipes count ranks), and the token in every pod."""
    job, offset = job_manifest["metadata"]["name"], 0
    for task in job_manifest["spec"]["tasks"]:
        pod = task["template"]["spec"]
        container = pod["containers"][0]
        slots = int(next(e["value"] for e in container["env"] if e["name"] == "LOCAL_WORLD_SIZE"))
        container["env"].append({"name": RANK_OFFSET_ENV, "value": str(offset)})
        _mount_token(pod, container, job, WATCHER_UID)
        offset += task["replicas"] * slots


def render_store_objects(job: str, metadata: dict[str, Any], workspace_label: dict[str, str],
                         token: str) -> list[dict[str, Any]]:
    """The token Secret, the store's Service and the NetworkPolicy fencing the watcher pod."""
    (_, value), = workspace_label.items()
    watcher = {WATCHER_LABEL: value}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {**metadata, "name": store_secret_name(job)}, "stringData": {TOKEN_KEY: token}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {**metadata, "name": watcher_name(job)},
               "spec": {"type": "ClusterIP", "selector": dict(watcher),
                        "ports": [{"name": "store", "protocol": "TCP", "port": ELASTIC_STORE_PORT,
                                   "targetPort": ELASTIC_STORE_PORT}]}}
    fence = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {**metadata, "name": watcher_name(job)},
             "spec": {"podSelector": {"matchLabels": dict(watcher)}, "policyTypes": ["Ingress"],
                      "ingress": [{"from": [{"podSelector": {"matchLabels": dict(workspace_label)}}],
                                   "ports": [{"protocol": "TCP", "port": ELASTIC_STORE_PORT}]}]}}
    return [secret, service, fence]


def watcher_store(deployment: dict[str, Any], job: str) -> None:
    """The watcher serves the store in its own process: the token mounted, the port declared, and
    the arguments that start it (recipes/watcher.py --store-port, --store-token-file)."""
    pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == WATCHER_CONTAINER)
    _mount_token(pod, container, job, WATCHER_UID)
    container["ports"] = [{"name": "store", "containerPort": ELASTIC_STORE_PORT, "protocol": "TCP"}]
    container["command"] += ["--store-port", str(ELASTIC_STORE_PORT), "--store-token-file", TOKEN_FILE]
    # the store holds the quorum's keys in memory (recipes.elastic_store: 256 MiB at most, a few MiB in
    # use) plus the frames being read; the limit leaves that bound room, so a full store is refused by
    # the store, not ended by the kernel's OOM killer (which would lose the quorum)
    container["resources"] = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}

