"""Air-gapped sites (issue 41 item 3): what the bundle leaves to the network is said at preflight,
and Volcano's controllers use an image already on the node.

Upstream: Volcano's installer/volcano-development.yaml at the pinned tag (v1.11.0, and v1.15.1
alike; shipped byte for byte as core/bootstrap/volcano-<tag>.yaml) sets `imagePullPolicy: Always` on vc-webhook-manager,
vc-controller-manager and vc-scheduler; with Always the kubelet resolves the image with the
registry at every container start, IfNotPresent uses a local copy
(kubernetes.io/docs/concepts/containers/images/#image-pull-policy), so only IfNotPresent works
after `ctr -n k8s.io images import` on a node without a registry.
"""

from __future__ import annotations

import subprocess

import yaml

from core.bootstrap import offline, versions, volcano
from core.bootstrap.deploy import build_plan, deploy
from core.state.node_records import add_nodes
from core.state.store import Store
from tests.bootstrap.test_upstream_rules import _node

VERSION = versions.volcano_for(versions.K3S_VERSION)  # the pinned release, shipped with geotrain


class _Recorder:
    """Stands in for a node session: keeps what would be uploaded (bytes never reach the dry-run log)."""

    def __init__(self):
        self.files, self.commands = {}, []

    def change(self, command, **_):
        self.commands.append(command)

    def put(self, path, content, mode=0o644):
        self.files[path] = content


def _containers(docs):
    for doc in docs:
        spec = ((doc or {}).get("spec") or {})
        pod = (spec.get("template") or {}).get("spec") or {}
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            yield doc["kind"], doc["metadata"]["name"], container


def test_the_release_pulls_always_and_geotrain_applies_it_if_not_present():
    release = volcano.shipped_manifest(VERSION)
    before = list(yaml.safe_load_all(release))
    policies = {(kind, name): c.get("imagePullPolicy") for kind, name, c in _containers(before)}
    # upstream's choice (v1.11.0 and v1.15.1 alike): webhook-manager (admission Job and Deployment),
    # controller-manager and scheduler
    assert {p for p in policies.values()} == {"Always"} and len(policies) == 4
    session = _Recorder()
    path = volcano._manifest_on_server(VERSION, None, session)  # what the volcano step uploads
    after = list(yaml.safe_load_all(session.files[path]))
    assert {c.get("imagePullPolicy") for _, _, c in _containers(after)} == {"IfNotPresent"}
    # nothing else changed: the same objects once the policies are set aside
    for _, _, container in _containers(before):
        container["imagePullPolicy"] = "IfNotPresent"
    assert after == before


def test_a_downloaded_manifest_gets_the_same_rewrite_with_sed(tmp_path):
    """Another paired release is fetched on the server and rewritten there by GNU sed (a real one)."""
    release = volcano.shipped_manifest(VERSION)
    path = tmp_path / "volcano.yaml"
    path.write_bytes(release)
    subprocess.run(["sed", "-i", volcano.ALWAYS_TO_IF_NOT_PRESENT, str(path)], check=True)
    assert path.read_bytes() == volcano.pull_if_not_present(release)


def test_preflight_says_in_one_line_what_each_offline_node_still_needs(geotrain_home, tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / versions.airgap_images("amd64")).write_bytes(b"tar")  # arm64's missing
    nodes = [_node("x86-nv", "198.51.100.10", gpus=["nvidia"]), _node("x86-amd", "198.51.100.11", gpus=["amd"]),
             _node("gh200", "198.51.100.12", arch="aarch64", gpus=["nvidia"])]
    said = {}
    _dry_run(nodes, only=["preflight"], bundle=str(bundle),
             on_event=lambda e: said.__setitem__(e.node, e.message) if "offline" in (e.message or "") else None)
    assert set(said) == {"x86-nv", "x86-amd", "gh200"}
    for node, line in said.items():
        assert "\n" not in line
        assert all(image in line for image in offline.volcano_images(VERSION))
        assert "apt: runc" in line and "PyPI" in line
    assert versions.NVIDIA_PLUGIN_IMAGE in said["x86-nv"] and versions.AMD_PLUGIN_IMAGE not in said["x86-nv"]
    assert versions.AMD_PLUGIN_IMAGE in said["x86-amd"] and "rocm/pytorch" in said["x86-amd"]
    assert "nvcr.io/nvidia/pytorch" in said["gh200"] and "k3s-airgap-images-arm64.tar is not in" in said["gh200"]
    assert "k3s's own images" not in said["x86-nv"] and "nvidia-container-toolkit" in said["x86-nv"]


def _dry_run(nodes, only, bundle=None, on_event=None):
    store = Store()
    add_nodes(store, nodes)
    plan = build_plan(store, "up", [n.name for n in nodes], subnet="10.77.0.0/24")
    plan.k3s.bundle = bundle
    return deploy(plan, only=only, dry_run=True, store=store, on_event=on_event)


def test_preflight_warns_where_the_vendors_device_plugin_has_no_image_for_the_cpu(geotrain_home):
    """ROCm/k8s-device-plugin publishes no arm64 image (its issue #151): an AMD arm64 node's GPUs
    would never be advertised, so preflight says so; NVIDIA's plugin is built for both."""
    nodes = [_node("amd-arm", "198.51.100.10", arch="aarch64", gpus=["amd"]),
             _node("gh200", "198.51.100.11", arch="aarch64", gpus=["nvidia"])]
    said = {}
    _dry_run(nodes, only=["preflight"], on_event=lambda e: said.__setitem__(e.node, e.message)
             if "ready" in (e.message or "") else None)
    assert "AMD device plugin has no arm64 image" in said["amd-arm"]
    assert "warning" not in said["gh200"]
