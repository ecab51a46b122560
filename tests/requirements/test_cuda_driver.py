"""An NVIDIA node's driver against the CUDA its image is built with (issue 41 item 11).

Upstream: CUDA minor version compatibility, docs.nvidia.com/deploy/cuda-compatibility/
minor-version-compatibility.html Table 1: CUDA 13.x needs a driver >= 580, 12.x >= 525,
11.x >= 450. The default images' CUDA: pytorch/pytorch:2.7.1-cuda12.8-... (its tag) and NGC
PyTorch 25.04 (CUDA 12.9, its release notes).
"""

from __future__ import annotations

from core.domain.images import IMAGE_CUDA, NGC_PYTORCH, UPSTREAM_IMAGES
from core.requirements.cuda_driver import driver_branch, driver_findings
from core.requirements.report import FAIL, OK, UNKNOWN


def _facts(*drivers):
    return {"gpus": [{"vendor": "nvidia", "name": "H100", "driver": d} for d in drivers]}


def test_the_default_images_need_a_cuda_12_driver():
    assert IMAGE_CUDA == {UPSTREAM_IMAGES["nvidia"]: "12.8", NGC_PYTORCH: "12.9"}
    image = UPSTREAM_IMAGES["nvidia"]
    assert [f.verdict for f in driver_findings("a", _facts("525.60.13"), image)] == [OK]
    assert [f.verdict for f in driver_findings("a", _facts("570.86.15", "570.86.15"), NGC_PYTORCH)] == [OK]
    old = driver_findings("a", _facts("470.239.06"), image)
    assert [f.verdict for f in old] == [FAIL]
    assert "525" in old[0].todo and "--image" in old[0].todo and "11.x" in old[0].todo
    assert [f.verdict for f in driver_findings("a", _facts("550.1", "515.2"), image)] == [FAIL]  # the oldest counts


def test_unknown_drivers_custom_images_and_other_vendors():
    assert [f.verdict for f in driver_findings("a", _facts("N/A"), UPSTREAM_IMAGES["nvidia"])] == [UNKNOWN]
    assert driver_findings("a", _facts("400.1"), "registry.example.com/team/own:1") == []  # a team's image
    assert driver_findings("a", {"gpus": [{"vendor": "amd", "driver": "6.8"}]}, UPSTREAM_IMAGES["amd"]) == []
    assert driver_findings("a", {}, UPSTREAM_IMAGES["cpu"]) == []
    assert driver_branch("570.86.15") == 570 and driver_branch("; rm -rf /") is None


def test_the_check_before_deploy_judges_each_placed_nodes_driver(cluster):
    """A registered cluster (FakeKubeAPI, a stand-in API server) whose pool facts say driver 470."""
    from core.requirements.check import check_before_deploy
    from core.state.node_records import get_node, update_node
    from core.state.store import Store
    from tests.kubernetes.conftest import make_spec

    cluster()  # gpu-a and gpu-b, driver 550.54: fine for CUDA 12.8
    spec = make_spec(cluster="mycluster", workers=2)
    report = check_before_deploy(Store(), spec, {})
    assert {(f.node, f.verdict) for f in report.findings if f.check == "NVIDIA driver"} == {("gpu-a", OK), ("gpu-b", OK)}
    old = get_node(Store(), "gpu-b")
    old.facts["gpus"] = [{**g, "driver": "470.239.06"} for g in old.facts["gpus"]]
    update_node(Store(), old)
    failed = [f for f in check_before_deploy(Store(), spec, {}).failures if f.check == "NVIDIA driver"]
    assert [f.node for f in failed] == ["gpu-b"] and "525" in failed[0].needed
