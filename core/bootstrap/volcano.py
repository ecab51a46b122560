"""Volcano (the batch scheduler workspaces run on), its `geotrain` queue, GPU plugins.

Applied from the server node with k3s's kubectl, as cluster-admin, so only a manifest whose
sha256 is known is applied: the release paired with K3S_VERSION ships with geotrain
(volcano-v1.15.1.yaml: installer/volcano-development.yaml of github.com/volcano-sh/volcano at
tag v1.15.1, byte for byte, Apache License 2.0, Copyright The Volcano Authors; and
volcano-v1.11.0.yaml, the same at v1.11.0, for clusters built before on k3s 1.31) and is
uploaded; another paired release is downloaded on the server and checked against
versions.VOLCANO_MANIFEST_SHA256 before it is applied; a local copy the user passes
(--volcano-manifest, e.g. with mirrored images) is theirs and applied as given. Each part
is applied only when missing or at another version, and waits for the scheduler are bounded.

The release's manifest sets `imagePullPolicy: Always` on its controllers (installer/
volcano-development.yaml at v1.11.0 and at v1.15.1: vc-webhook-manager, vc-controller-manager, vc-scheduler),
so the kubelet asks the registry at every start even for an image `ctr images import` put on
the node (kubernetes.io/docs/concepts/containers/images/#image-pull-policy): geotrain applies it
with IfNotPresent (pull_if_not_present), after its sha256 is checked.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path

from core.bootstrap import checksums, failures, k3s, services, versions
from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed
from core.domain.architectures import ARCH_LABEL

MANIFEST_URL = ("https://raw.githubusercontent.com/volcano-sh/volcano/{version}"
                "/installer/volcano-development.yaml")
REMOTE_DIR = "/var/lib/rancher/k3s/server/manifests-geotrain"
DEPLOYMENTS = ("volcano-scheduler", "volcano-controllers", "volcano-admission")
# The admission webhook's Service: the queue is refused ("connection refused") until it has
# a ready endpoint, even after the deployment reports available.
WEBHOOK_SERVICE = "volcano-admission-service"
_ALWAYS = re.compile(rb"^([ \t]*)imagePullPolicy:[ \t]*Always[ \t]*$", re.MULTILINE)  # as the sed below
ALWAYS_TO_IF_NOT_PRESENT = r"s/^\([[:space:]]*\)imagePullPolicy:[[:space:]]*Always[[:space:]]*$/\1imagePullPolicy: IfNotPresent/"


def pull_if_not_present(manifest: bytes) -> bytes:
    """The manifest with every `imagePullPolicy: Always` made IfNotPresent (an image imported on an
    offline node is then used, not re-pulled); nothing else changes."""
    return _ALWAYS.sub(rb"\1imagePullPolicy: IfNotPresent", manifest)


def render_queue(name: str) -> str:
    return k3s.dump({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "geotrain"}},
        "spec": {"weight": 1, "reclaimable": False},
    })


def _scheduler(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    kubectl = k3s.kubectl(plan)
    image = session.fact(f"{kubectl} -n volcano-system get deployment volcano-scheduler"
                         " -o jsonpath='{.spec.template.spec.containers[0].image}' 2>/dev/null")
    if image.ok and image.stdout.strip().endswith(f":{plan.volcano.version}"):
        return f"Volcano {plan.volcano.version} present"
    source = _manifest_on_server(plan.volcano.version, plan.volcano.manifest, session)
    applied = session.change(f"{kubectl} apply --server-side --force-conflicts -f {shlex.quote(source)}",
                             timeout=300, check=False, what="applying the Volcano manifest")
    if not applied.ok:
        raise StepFailed(failures.apply_failure("applying the Volcano manifest", applied, session,
                                                downloaded=False))
    for name in DEPLOYMENTS:
        services.wait_until(target, f"{kubectl} -n volcano-system rollout status deployment/{name}"
                            " --timeout=10s >/dev/null 2>&1", f"Volcano's {name} to be available",
                            timeout=plan.volcano.timeout, interval=2)
    return f"Volcano {plan.volcano.version} applied"


def shipped_manifest(version: str) -> bytes | None:
    """The release manifest geotrain ships for `version`, checked against its pin; None: none shipped."""
    path = Path(__file__).parent / f"volcano-{version}.yaml"
    if not path.is_file():
        return None
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != versions.VOLCANO_MANIFEST_SHA256.get(version):
        raise StepFailed(f"geotrain's copy of the Volcano {version} manifest ({path}) is not the "
                         "release's: reinstall geotrain")
    return data


def _manifest_on_server(version: str, local: str | None, session) -> str:
    """Put the manifest on the server (a file, never a URL for kubectl); returns its path."""
    source = f"{REMOTE_DIR}/volcano-{version}.yaml"
    session.change(f"mkdir -p {REMOTE_DIR}", what="creating the manifest dir")
    if local:
        if not Path(local).is_file():
            raise StepFailed(f"Volcano manifest {local} not found: pass the path of a copy of "
                             "volcano-development.yaml")
        session.put(source, Path(local).read_text(), mode=0o644)
        return source
    shipped = shipped_manifest(version)
    if shipped is not None:
        session.put(source, pull_if_not_present(shipped), mode=0o644)
        return source
    want = versions.VOLCANO_MANIFEST_SHA256.get(version)
    if want is None:
        raise StepFailed(f"no sha256 is known for the Volcano {version} manifest, and geotrain "
                         "applies none unverified as cluster-admin: pass a copy you checked with "
                         "--volcano-manifest FILE")
    part = shlex.quote(source + ".download")
    fetched = session.change(f"curl -sfL --retry 3 -o {part} "
                             f"{shlex.quote(MANIFEST_URL.format(version=version))} && "
                             f"{checksums.verify_download(want, part, 'false')} && "
                             f"sed -i {shlex.quote(ALWAYS_TO_IF_NOT_PRESENT)} {part} && "
                             f"mv {part} {shlex.quote(source)}", timeout=300, check=False,
                             what=f"downloading the Volcano {version} manifest")
    if not fetched.ok:
        raise StepFailed(f"downloading the Volcano {version} manifest failed (exit code "
                         f"{fetched.exit_code}: no way out, or not the release's file): download "
                         "installer/volcano-development.yaml at that tag elsewhere and pass it "
                         "with --volcano-manifest FILE")
    return source


def _queue(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    kubectl = k3s.kubectl(plan)
    if session.fact(f"{kubectl} get queue {shlex.quote(plan.volcano.queue)} >/dev/null 2>&1").ok:
        return f"queue {plan.volcano.queue} present"
    path = f"{REMOTE_DIR}/queue-{plan.volcano.queue}.yaml"
    session.change(f"mkdir -p {REMOTE_DIR}", what="creating the manifest dir")
    session.put(path, render_queue(plan.volcano.queue), mode=0o644)
    services.wait_until(target, webhook_ready_probe(kubectl), "Volcano's admission webhook to "
                        "serve (a ready endpoint)", timeout=plan.volcano.timeout, interval=2)
    session.change(f"{kubectl} apply -f {shlex.quote(path)}", what="creating the queue")
    return f"queue {plan.volcano.queue} created"


def webhook_ready_probe(kubectl: str) -> str:
    """True once the webhook's Service has a ready address (the API server can call it)."""
    query = (f"{kubectl} -n volcano-system get endpoints {WEBHOOK_SERVICE}"
             " -o jsonpath='{.subsets[*].addresses[*].ip}' 2>/dev/null")
    return f"[ -n \"$({query})\" ]"


# The platforms each plugin image is published for: NVIDIA builds linux/amd64 and linux/arm64
# (NVIDIA/k8s-device-plugin deployments/container/multi-arch.mk); ROCm's is amd64 only
# (ROCm/k8s-device-plugin issue #151: "exec format error" on arm64, no arm64 image published).
PLUGIN_ARCHES = {"nvidia": ("amd64", "arm64"), "amd": ("amd64",)}


def _daemonset(name: str, image: str, vendor: str, container: dict,
               sys_mount: bool = False) -> dict:
    """A device-plugin DaemonSet that runs only on nodes labelled with this GPU vendor, of an
    architecture its image is built for."""
    labels = {"name": name, "app.kubernetes.io/managed-by": "geotrain"}
    selector = {k3s.GPU_VENDOR_LABEL: vendor}
    if len(PLUGIN_ARCHES[vendor]) == 1:
        selector[ARCH_LABEL] = PLUGIN_ARCHES[vendor][0]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "kube-system", "labels": labels},
            "spec": {"selector": {"matchLabels": {"name": name}},
                     "updateStrategy": {"type": "RollingUpdate"},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "nodeSelector": selector,
                         "priorityClassName": "system-node-critical",
                         "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                         {"key": f"{vendor}.com/gpu", "operator": "Exists",
                                          "effect": "NoSchedule"}],
                         "containers": [{"name": name, "image": image, **container}],
                         "volumes": [{"name": "device-plugin",
                                      "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]
                         + ([{"name": "sys", "hostPath": {"path": "/sys"}}] if sys_mount else [])}}}}


def nvidia_plugin() -> dict:
    """NVIDIA/k8s-device-plugin deployments/static/nvidia-device-plugin.yml at the pinned tag."""
    return _daemonset("nvidia-device-plugin-daemonset", versions.NVIDIA_PLUGIN_IMAGE, "nvidia", {
        # PASS_DEVICE_SPECS: the device nodes go to the kubelet too, so a systemd daemon-reload
        # keeps them in the pod's cgroup (nvidia-container-toolkit #48; core.bootstrap.nvidia_devices)
        "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}, {"name": "PASS_DEVICE_SPECS", "value": "true"}],
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "device-plugin",
                          "mountPath": "/var/lib/kubelet/device-plugins"}]})


def amd_plugin() -> dict:
    """ROCm/k8s-device-plugin k8s-ds-amdgpu-dp.yaml, with a release image (not `latest`)."""
    return _daemonset("amdgpu-device-plugin-daemonset", versions.AMD_PLUGIN_IMAGE, "amd", {
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "device-plugin",
                          "mountPath": "/var/lib/kubelet/device-plugins"},
                         {"name": "sys", "mountPath": "/sys"}]}, sys_mount=True)


def _label_gpu_nodes(ctx: DeployContext, target: NodeTarget) -> list[str]:
    """k3s applies `node-label` only when a node registers: label nodes that joined earlier."""
    kubectl, done = k3s.kubectl(ctx.plan), []
    for node in ctx.targets.values():
        vendor = k3s.gpu_vendor(node.facts)
        key = k3s.GPU_VENDOR_LABEL.replace(".", "\\.")
        have = target.session.fact(f"{kubectl} get node {shlex.quote(node.name)} -o jsonpath="
                                   f"'{{.metadata.labels.{key}}}' 2>/dev/null") if vendor else None
        if vendor and not (have.ok and have.stdout.strip() == vendor):
            label = f"{k3s.GPU_VENDOR_LABEL}={vendor}"
            target.session.change(f"{kubectl} label node {shlex.quote(node.name)} "
                                  f"{shlex.quote(label)} --overwrite >/dev/null",
                                  what=f"labelling {node.name} as a {vendor} GPU node")
            done.append(f"{node.name} labelled")
    return done


def _device_plugins(ctx: DeployContext, target: NodeTarget) -> str:
    plan, session = ctx.plan, target.session
    kubectl = k3s.kubectl(plan)
    vendors = {k3s.gpu_vendor(t.facts) for t in ctx.targets.values()} - {None}
    wanted = [render for vendor, render in (("nvidia", nvidia_plugin), ("amd", amd_plugin))
              if vendor in vendors]
    if not wanted:
        return "no GPUs: no device plugin"
    applied = _label_gpu_nodes(ctx, target)
    if not session.fact(f"test -d {REMOTE_DIR}").ok:
        session.change(f"mkdir -p {REMOTE_DIR}", what="creating the manifest dir")
    for render in wanted:
        manifest = render()
        name, image = manifest["metadata"]["name"], manifest["spec"]["template"]["spec"][
            "containers"][0]["image"]
        have = session.fact(f"{kubectl} -n kube-system get daemonset {name} -o jsonpath="
                            "'{.spec.template.spec.containers[0].image}' 2>/dev/null")
        if have.ok and have.stdout.strip() == image:
            continue
        path = f"{REMOTE_DIR}/{name}.yaml"
        session.put(path, k3s.dump(manifest), mode=0o644)
        session.change(f"{kubectl} apply -f {shlex.quote(path)}", what=f"applying {name}")
        applied.append(name)
    return f"applied {', '.join(applied)}" if applied else "device plugins present"


def _server_only(ctx: DeployContext, alive: list[NodeTarget]) -> list[NodeTarget]:
    return [t for t in alive if t.spec.role == "server"]


STEP = Step("volcano", [Phase("scheduler", _scheduler, _server_only),
                        Phase("queue", _queue, _server_only),
                        Phase("device plugins", _device_plugins, _server_only)])
