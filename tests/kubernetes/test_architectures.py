"""Every pod runs an image built for its node's CPU (issue 41 item 2).

Upstream's published platforms, as core.domain.images records them (IMAGE_ARCHES):
  pytorch/pytorch on Docker Hub: linux/amd64 only (github.com/pytorch/pytorch issues #145716,
  #157139); rocm/pytorch: linux/amd64 only (hub.docker.com/r/rocm/pytorch/tags); NVIDIA's NGC
  nvcr.io/nvidia/pytorch:25.04-py3: linux/amd64 and linux/arm64 under one tag (the image GH200
  and GB200 Dockerfiles build FROM). The kubelet labels every node kubernetes.io/arch with its
  GOARCH (kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-arch).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.bootstrap.image_pull import _pull, node_image
from core.domain.architectures import ARCH_LABEL
from core.domain.images import DEFAULT_IMAGES, IMAGE_ARCHES, NGC_PYTORCH, UPSTREAM_IMAGES, image_for
from core.domain.records import Cluster, Node
from core.errors import InvalidInput
from core.kubernetes.manifests import render_manifests, render_volcano_job
from core.kubernetes.node_groups import NodeGroup, groups_from_kubernetes, groups_from_nodes
from tests.kubernetes.conftest import make_spec

CLUSTER = Cluster(name="dc", kind="geotrain")


def _pods(job):
    for task in job["spec"]["tasks"]:
        yield task["name"], task["template"]["spec"]


def _arch_of(pod) -> str:
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    values = {tuple(e["values"]) for t in terms for e in t["matchExpressions"] if e["key"] == ARCH_LABEL}
    assert len(values) == 1, values  # one architecture per task: its pods share one image
    return values.pop()[0]


def test_every_default_image_is_published_for_the_architecture_it_is_chosen_for():
    for (vendor, arch), image in DEFAULT_IMAGES.items():
        assert arch in IMAGE_ARCHES[image], (vendor, arch, image)
    assert IMAGE_ARCHES[UPSTREAM_IMAGES["nvidia"]] == ("amd64",) == IMAGE_ARCHES[UPSTREAM_IMAGES["amd"]]
    assert image_for("nvidia", arch="arm64").image == image_for("cpu", arch="arm64").image == NGC_PYTORCH
    assert image_for("nvidia").image == UPSTREAM_IMAGES["nvidia"]  # x86 unchanged


def test_nodes_of_two_architectures_are_two_tasks_each_with_its_own_image():
    nodes = [Node("h100", "10.0.0.1", "u", facts={"gpus": [{"vendor": "nvidia", "name": "H100"}] * 8,
                                                 "system": {"arch": "x86_64"}}),
             Node("gh200", "10.0.0.2", "u", facts={"gpus": [{"vendor": "nvidia", "name": "GH200"}] * 8,
                                                  "system": {"arch": "aarch64"}})]
    groups = groups_from_nodes(nodes)
    assert [(g.arch, g.hostnames) for g in groups] == [("amd64", ("h100",)), ("arm64", ("gh200",))]
    job = render_volcano_job("ws-arch", make_spec(workers=2), CLUSTER, groups)
    seen = {}
    for name, pod in _pods(job):
        image = pod["containers"][0]["image"]
        seen[name] = (_arch_of(pod), image)
        assert _arch_of(pod) in IMAGE_ARCHES[image]
    assert seen == {"master": ("amd64", UPSTREAM_IMAGES["nvidia"]), "worker-nvidia2": ("arm64", NGC_PYTORCH)}


def test_an_amd_arm64_node_is_refused_at_plan_in_one_line_naming_image():
    groups = [NodeGroup("amd", 8, ("mi-arm",), arch="arm64")]
    with pytest.raises(InvalidInput) as caught:
        render_manifests("ws-arm", make_spec(workers=1), CLUSTER, groups, "default", {})
    line = str(caught.value)
    assert "\n" not in line and "--image" in line and "arm64" in line and "AMD" in line
    # the team's own image is theirs to build for arm64: used as given (its -rocm build)
    job = render_volcano_job("ws-arm", make_spec(workers=1, image="registry.example.com/t/r:1"), CLUSTER, groups)
    assert [p["containers"][0]["image"] for _, p in _pods(job)] == ["registry.example.com/t/r:1-rocm"]


def test_registered_nodes_are_grouped_by_the_kubelets_arch_label():
    nodes = [{"metadata": {"name": "a", "labels": {ARCH_LABEL: "arm64"}}, "status": {"allocatable": {}}},
             {"metadata": {"name": "b"}, "status": {"allocatable": {}, "nodeInfo": {"architecture": "amd64"}}},
             {"metadata": {"name": "c"}, "status": {"allocatable": {}}}]  # neither: recorded before, amd64
    assert [(g.arch, g.hostnames) for g in groups_from_kubernetes(nodes)] == [("amd64", ("b", "c")),
                                                                               ("arm64", ("a",))]
    bad = [{"metadata": {"name": "x", "labels": {ARCH_LABEL: "amd64; rm -rf /"}}, "status": {}}]
    with pytest.raises(InvalidInput, match="not a CPU architecture"):
        groups_from_kubernetes(bad)
    assert NodeGroup.from_dict({"vendor": "cpu", "nodes": ["old"]}).arch == "amd64"  # recorded before


def test_the_pre_pull_takes_the_nodes_architecture_and_skips_where_no_image_exists():
    ctx = SimpleNamespace(plan=SimpleNamespace(image=None))
    gh200 = SimpleNamespace(facts={"gpus": [{"vendor": "nvidia"}], "system": {"arch": "aarch64"}}, name="gh")
    assert node_image(ctx, gh200) == NGC_PYTORCH  # nvcr.io is already a registry host
    amd_arm = SimpleNamespace(facts={"gpus": [{"vendor": "amd"}], "system": {"arch": "aarch64"}}, name="mi",
                              gather_facts=lambda: None)
    said = _pull(ctx, amd_arm)
    assert said.startswith("skipped:") and "--image" in said and "arm64" in said


@pytest.mark.parametrize("message", [
    # containerd (images/image.go) when the image index lacks the node's platform
    'failed to pull and unpack image "docker.io/pytorch/pytorch:2.7.1": no match for platform in manifest: not found',
    # Docker's registry client, the same case
    "no matching manifest for linux/arm64/v8 in the manifest list entries"])
def test_a_pull_that_finds_no_build_for_the_node_says_so_not_check_the_name(message):
    from core.kubernetes.pod_phases import ARCH_HINT, PULL_HINT, pull_phase

    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "gh200"}, "status": {"phase": "Pending",
           "containerStatuses": [{"name": "trainer", "state": {"waiting": {"reason": "ErrImagePull",
                                                                           "message": message}}}]}}
    _, said = pull_phase(pod, [], 0.0)
    assert said.endswith(ARCH_HINT) and PULL_HINT not in said and "--image" in said
