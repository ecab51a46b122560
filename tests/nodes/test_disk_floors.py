"""Issue 41, item 8: a cluster of the default images needs room for each node's image (10-50 GB,
core.domain.image_sizes with its sources), not the 5 GB base floor; and the images step runs by
default when no --image (and no air-gap bundle) is given, so a first workspace does not sit
pulling while its rendezvous waits."""

from __future__ import annotations

import pytest

from core.bootstrap.deploy import build_plan
from core.bootstrap.preflight import context
from core.cli import main
from core.domain.image_sizes import BASE_DISK_GB, IMAGE_DISK_GB
from core.domain.images import NGC_PYTORCH, UPSTREAM_IMAGES
from core.domain.records import Node
from core.nodes.blockers import Context, disk_space
from core.state.node_records import add_nodes
from core.state.store import Store

NVIDIA = [{"vendor": "nvidia", "name": "NVIDIA H100"}]
AMD = [{"name": "AMD Instinct MI300X"}]


def _facts(free: float, gpus: list, arch: str = "x86_64") -> dict:
    return {"disk": {"var_lib_free_gb": free}, "gpus": gpus, "system": {"arch": arch}}


def _need(image: str) -> float:
    return BASE_DISK_GB + sum(IMAGE_DISK_GB[image])


@pytest.mark.parametrize("gpus, arch, image", [
    (NVIDIA, "x86_64", UPSTREAM_IMAGES["nvidia"]), (AMD, "x86_64", UPSTREAM_IMAGES["amd"]),
    ([], "x86_64", UPSTREAM_IMAGES["cpu"]), (NVIDIA, "aarch64", NGC_PYTORCH)])
def test_default_images_set_each_vendors_floor(gpus, arch, image):
    need = _need(image)
    ctx = Context(default_images=True)
    assert disk_space(_facts(need, gpus, arch), ctx) == []
    (said,) = disk_space(_facts(need - 1, gpus, arch), ctx)
    assert f"need {need:g} with about {sum(IMAGE_DISK_GB[image]):g} for {image}" in said and "--image" in said
    assert disk_space(_facts(need - 1, gpus, arch), Context()) == []  # a pool node, or a cluster's own image


def test_the_amd_floor_is_several_times_the_base():
    assert _need(UPSTREAM_IMAGES["amd"]) >= 50 > _need(UPSTREAM_IMAGES["nvidia"]) >= 15 > BASE_DISK_GB
    # AMD on arm64 has no default image (a workspace needs --image): the base floor only
    assert disk_space(_facts(BASE_DISK_GB, AMD, "aarch64"), Context(default_images=True)) == []


def _nodes():
    add_nodes(Store(), [Node(name=f"n{i}", host=f"198.51.100.{i + 1}", username="ubuntu", facts={"gpus": NVIDIA})
                        for i in range(2)])


def test_the_wizard_preflight_judges_default_images_only_without_a_cluster_image(geotrain_home):
    _nodes()
    plan = build_plan(Store(), "c1", ["n0"])

    class Target:  # preflight.context reads these two
        state = {}
        spec = plan.nodes[0]
    assert context(plan, Target()).default_images
    plan.image = "registry.example.com/team/recipes:2.0"
    assert not context(plan, Target()).default_images


def test_the_images_step_is_on_by_default_without_an_image(geotrain_home, capsys):
    _nodes()
    dry = ["clusters", "deploy", "c1", "--nodes", "n0", "--dry-run"]
    for extra, pulled in (([], True), (["--no-pull-images"], False),
                          (["--image", "registry.example.com/team/recipes:2.0"], False),
                          (["--image", "registry.example.com/team/recipes:2.0", "--pull-images"], True)):
        assert main([*dry, *extra]) == 0
        assert ("[images] change:" in capsys.readouterr().out) is pulled, extra
