"""The one versions table (core/bootstrap/versions.py SUPPORT): each pin with its end of life (or,
where upstream publishes none, the date to look at it again), its source and when it was read.
This test fails once a date has passed (today's date), except for the pins listed in
PAST_END_OF_LIFE with what their move needs; and it fails when such an entry is stale."""

from __future__ import annotations

import datetime

from core.bootstrap import k3s, versions, volcano
from core.bootstrap.plan import ClusterPlan, NodeSpec, NodeTarget
from core.nodes.facts import cgroup


def test_the_table_holds_the_pins_in_use():
    pins = {"k3s": versions.K3S_VERSION, "volcano": versions.volcano_for(versions.K3S_VERSION),
            "containerd": versions.CONTAINERD_VERSION, "nvidia-device-plugin": versions.NVIDIA_PLUGIN_VERSION,
            "amd-device-plugin": versions.AMD_PLUGIN_VERSION}
    assert {name: s.pin for name, s in versions.SUPPORT.items()} == pins
    assert all("read" in s.source or "look again" in s.source for s in versions.SUPPORT.values())


def test_no_pin_is_past_its_end_of_life():
    today = datetime.date.today()
    past = {name: s for name, s in versions.SUPPORT.items() if s.until < today}
    unexplained = {name: f"{s.pin}: {'end of life' if s.published else 'look again by'} {s.until} ({s.source})"
                   for name, s in past.items() if name not in versions.PAST_END_OF_LIFE}
    assert unexplained == {}, "move these pins (versions.py) to a supported release"
    stale = set(versions.PAST_END_OF_LIFE) - set(past)
    assert stale == set(), "no longer past its end of life: take it out of PAST_END_OF_LIFE"


def test_the_pinned_pairing_follows_the_compatibility_tables():
    # Volcano README "Kubernetes compatibility": v1.15 ticks 1.35; containerd RELEASES.md
    # "Kubernetes Support": 1.35 -> 2.2.0+, 2.1.5+, 1.7.28+
    assert versions.k8s_minor(versions.K3S_VERSION) == "1.35"
    assert versions.volcano_for(versions.K3S_VERSION) == "v1.15.1"
    assert versions.containerd_supported(versions.CONTAINERD_VERSION, versions.K3S_VERSION)
    assert not versions.containerd_supported("1.7.27", versions.K3S_VERSION)
    assert versions.containerd_supported("2.3.4", versions.K3S_VERSION)  # a newer line than the row
    # the paired Volcano release ships with geotrain, byte for byte (its sha256 pinned)
    assert volcano.shipped_manifest(versions.volcano_for(versions.K3S_VERSION)) is not None


def test_a_cgroup_v1_node_tells_kubelet_1_35_to_run():
    """Kubernetes 1.35's kubelet refuses a cgroup v1 host (KEP-5573; failCgroupV1 defaults to true
    from 1.35, kubernetes/kubernetes#134298): such a node's kubelet gets fail-cgroupv1=false."""
    assert cgroup.parse("cgroup2fs\n") == {"version": 2} and cgroup.parse("tmpfs") == {"version": 1}
    assert cgroup.parse("") == {"version": None}
    plan = ClusterPlan("c", [NodeSpec("a", "10.0.0.1", role="server")])

    def kubelet(version: int | None, k3s_version: str) -> list[str]:
        plan.k3s.version = k3s_version
        facts = {"init": {"systemd": True}, "cgroup": {"version": version}, "addresses": ["10.0.0.1"]}
        return k3s.node_flags(plan, NodeTarget(plan.nodes[0], session=None, facts=facts)).get("kubelet-arg", [])
    assert kubelet(1, versions.K3S_VERSION) == ["cgroup-driver=systemd", "fail-cgroupv1=false"]
    assert kubelet(2, versions.K3S_VERSION) == ["cgroup-driver=systemd"]
    assert kubelet(1, "v1.31.4+k3s1") == ["cgroup-driver=systemd"]  # the default refused nothing there


def _toml(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


def test_containerd_2_gets_config_version_3_and_a_kept_1x_version_2():
    """containerd docs/cri/config.md: version 3 (containerd 2.x) splits the CRI plugin into
    io.containerd.cri.v1.images (pinned_images.sandbox, registry) and io.containerd.cri.v1.runtime
    (device ownership, runtimes, cni with bin_dirs since 2.1); version 2 (1.x, still read by 2.x)
    keeps io.containerd.grpc.v1.cri with sandbox_image and bin_dir."""
    from core.bootstrap import containerd

    assert containerd.config_version(versions.CONTAINERD_VERSION) == 3
    assert containerd.config_version("1.7.28") == 2 and containerd.config_version("2.0.0") == 3
    v3 = _toml(containerd.render_config(True, True, 3))
    assert v3["version"] == 3 and set(v3["plugins"]) == {"io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"}
    assert v3["plugins"]["io.containerd.cri.v1.images"] == {"pinned_images": {"sandbox": containerd.SANDBOX_IMAGE}}
    runtime = v3["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["device_ownership_from_security_context"] is True
    assert runtime["containerd"]["default_runtime_name"] == "nvidia"
    assert runtime["containerd"]["runtimes"]["runc"] == {"runtime_type": "io.containerd.runc.v2",
                                                         "options": {"SystemdCgroup": True}}
    assert runtime["containerd"]["runtimes"]["nvidia"]["options"] == {"BinaryName": containerd.NVIDIA_RUNTIME,
                                                                      "SystemdCgroup": True}
    assert runtime["cni"] == {"bin_dirs": [containerd.K3S_CNI_BIN], "conf_dir": containerd.K3S_CNI_CONF}
    v2 = _toml(containerd.render_config(False, False, 2))
    cri = v2["plugins"]["io.containerd.grpc.v1.cri"]
    assert v2["version"] == 2 and cri["sandbox_image"] == containerd.SANDBOX_IMAGE
    assert cri["cni"]["bin_dir"] == containerd.K3S_CNI_BIN and cri["containerd"]["default_runtime_name"] == "runc"
