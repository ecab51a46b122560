"""Volcano (the batch scheduler workspaces run on), its `geotrain` queue, GPU plugins.

Applied from the server node with k3s's kubectl: the release manifest by URL, or a local
copy (for air-gapped sites) copied over first. Each part is applied only when missing
or at another version, and waits for the scheduler are bounded.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from core.bootstrap import k3s, services
from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed
from core.nodes.facts import gpus

MANIFEST_URL = ("https://raw.githubusercontent.com/volcano-sh/volcano/{version}"
                "/installer/volcano-development.yaml")
NVIDIA_PLUGIN = ("https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/v0.17.0"
                 "/deployments/static/nvidia-device-plugin.yml")
AMD_PLUGIN = "https://raw.githubusercontent.com/ROCm/k8s-device-plugin/master/k8s-ds-amdgpu-dp.yaml"
REMOTE_DIR = "/var/lib/rancher/k3s/server/manifests-geotrain"
DEPLOYMENTS = ("volcano-scheduler", "volcano-controllers", "volcano-admission")


def render_queue(name: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "geotrain"}},
        "spec": {"weight": 1, "reclaimable": False},
    }, sort_keys=False)


def _scheduler(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    kubectl = k3s.kubectl(plan)
    image = session.fact(f"{kubectl} -n volcano-system get deployment volcano-scheduler"
                         " -o jsonpath='{.spec.template.spec.containers[0].image}' 2>/dev/null")
    if image.ok and image.stdout.strip().endswith(f":{plan.volcano.version}"):
        return f"Volcano {plan.volcano.version} present"
    if plan.volcano.manifest:
        local = Path(plan.volcano.manifest)
        if not local.is_file():
            raise StepFailed(f"Volcano manifest {local} not found: pass the path of a copy of "
                             "volcano-development.yaml")
        source = f"{REMOTE_DIR}/volcano.yaml"
        session.change(f"mkdir -p {REMOTE_DIR}", what="creating the manifest dir")
        session.put(source, local.read_text(), mode=0o644)
    else:
        source = MANIFEST_URL.format(version=plan.volcano.version)
    session.change(f"{kubectl} apply --server-side --force-conflicts -f {source}", timeout=300,
                   what="applying the Volcano manifest")
    for name in DEPLOYMENTS:
        services.wait_until(target, f"{kubectl} -n volcano-system rollout status deployment/{name}"
                            " --timeout=10s >/dev/null 2>&1", f"Volcano's {name} to be available",
                            timeout=plan.volcano.timeout, interval=2)
    return f"Volcano {plan.volcano.version} applied"


def _queue(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    kubectl = k3s.kubectl(plan)
    if session.fact(f"{kubectl} get queue {plan.volcano.queue} >/dev/null 2>&1").ok:
        return f"queue {plan.volcano.queue} present"
    path = f"{REMOTE_DIR}/queue-{plan.volcano.queue}.yaml"
    session.change(f"mkdir -p {REMOTE_DIR}", what="creating the manifest dir")
    session.put(path, render_queue(plan.volcano.queue), mode=0o644)
    session.change(f"{kubectl} apply -f {path}", what="creating the queue")
    return f"queue {plan.volcano.queue} created"


def _device_plugins(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    kubectl = k3s.kubectl(plan)
    vendors = set().union(*(gpus.vendors(t.facts) for t in ctx.targets.values()))
    wanted = []
    if "nvidia" in vendors:
        wanted.append(("nvidia-device-plugin-daemonset", NVIDIA_PLUGIN))
    if "amd" in vendors:
        wanted.append(("amdgpu-device-plugin-daemonset", AMD_PLUGIN))
    applied = []
    for name, url in wanted:
        if not session.fact(f"{kubectl} -n kube-system get daemonset {name} >/dev/null 2>&1").ok:
            session.change(f"{kubectl} apply -f {url}", what=f"applying {name}")
            applied.append(name)
    if not wanted:
        return "no GPUs: no device plugin"
    return f"applied {', '.join(applied)}" if applied else "device plugins present"


def _server_only(ctx: DeployContext, alive: list[NodeTarget]) -> list[NodeTarget]:
    return [t for t in alive if t.spec.role == "server"]


STEP = Step("volcano", [Phase("scheduler", _scheduler, _server_only),
                        Phase("queue", _queue, _server_only),
                        Phase("device plugins", _device_plugins, _server_only)])
