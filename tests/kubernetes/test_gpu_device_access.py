"""AMD pods can open their GPUs (issue 41 item 1): the rules of containerd and the kubelet that
decide who owns a device file inside a pod, encoded against what geotrain renders.

Upstream (the parts cannot run here: no containerd CRI, no GPU):
  containerd pkg/cri/opts/spec_linux_opts.go WithDevices: a device keeps the host's uid/gid
  unless the CRI plugin's `device_ownership_from_security_context` is true; then a non-zero
  runAsUser/runAsGroup of the container's securityContext becomes the device's owner/group
  (zero leaves the host's). Option documented in containerd docs/cri/config.md, and the reason
  it exists in kubernetes.io/blog/2021/11/09/non-root-containers-and-devices/.
"""

from __future__ import annotations

import tomllib

from core.bootstrap.containerd import render_config
from core.domain.records import Cluster, Node
from core.kubernetes.manifests import render_volcano_job
from core.kubernetes.node_groups import NodeGroup, groups_from_nodes
from core.kubernetes.pod_security import pod_specs, violations
from core.nodes.facts import device_groups, parse_all
from tests.kubernetes.conftest import make_spec

# The CRI runtime plugin's table: "io.containerd.grpc.v1.cri" in config version 2 (containerd 1.x),
# "io.containerd.cri.v1.runtime" in version 3 (containerd 2.x; docs/cri/config.md of each release).
CRI_TABLE = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
PVC = {"pvc": "geotrain-checkpoints"}
ROCM_FACTS = {"gpus": [{"vendor": "amd", "name": "MI300X"}] * 8, "system": {"arch": "x86_64"}}


def cri_runtime(config_text: str) -> dict:
    """The CRI runtime plugin's settings of a containerd config, for its config version."""
    config = tomllib.loads(config_text)
    return config["plugins"][CRI_TABLE[config.get("version", 2)]]


def _device_owner(host: tuple[int, int], container_context: dict, option: bool) -> tuple[int, int]:
    """The uid/gid a device gets in the container, as containerd's WithDevices computes it."""
    if not option:
        return host
    uid, gid = container_context.get("runAsUser") or 0, container_context.get("runAsGroup") or 0
    return (uid or host[0], gid or host[1])


def _mode_allows(owner: tuple[int, int], mode: int, uid: int, gids: set[int]) -> bool:
    """rw for this process on a device of `mode` (0660 on /dev/kfd and renderD*: udev's rules)."""
    if uid == owner[0]:
        return mode & 0o600 == 0o600
    if owner[1] in gids:
        return mode & 0o060 == 0o060
    return mode & 0o006 == 0o006


def _amd_job(groups, cluster):
    return render_volcano_job("ws-amd", make_spec(workers=2, recovery=PVC), cluster, groups)


def test_the_containerd_geotrain_writes_gives_devices_the_pods_owner():
    for systemd in (True, False):
        for nvidia in (True, False):
            cri = cri_runtime(render_config(systemd, nvidia))
            assert cri["device_ownership_from_security_context"] is True


def test_a_trainer_opens_a_render_node_whatever_gid_the_host_gave_it():
    """Hosts differ (render 104/109/110/992): with the option, the trainer's own uid/gid owns the
    device, so the pod needs no host gid at all; without it, only a matching supplemental group."""
    job = _amd_job([NodeGroup("amd", 8, ("mi300-a", "mi300-b"))], Cluster(name="dc", kind="geotrain"))
    for _, pod in pod_specs(job):
        context = pod["containers"][0]["securityContext"]
        uid, gid = context["runAsUser"], context["runAsGroup"]
        assert uid and gid, "a zero runAsUser/runAsGroup leaves the host's owner (WithDevices)"
        for host_render_gid in (104, 109, 110, 992):
            owner = _device_owner((0, host_render_gid), context, option=True)
            assert _mode_allows(owner, 0o660, uid, {gid}), host_render_gid
        # the old way: a device left the host's group opens only if that gid is in the pod's groups
        stranger = _device_owner((0, 992), context, option=False)
        assert not _mode_allows(stranger, 0o660, uid, {gid, *pod["securityContext"]["supplementalGroups"]})


def test_node_facts_carry_the_video_and_render_gids():
    assert device_groups.parse("video:x:44:\nrender:x:992:alice,bob\n") == {"video": 44, "render": 992}
    assert device_groups.parse("") == {}
    assert device_groups.parse("render:x:notanumber:\nvideo:x:-1:\nwheel:x:10:\nrender:x:0:") == {}
    found = parse_all("@@geotrain-fact:device_groups\nvideo:x:44:\nrender:x:110:\n")
    assert found["device_groups"] == {"video": 44, "render": 110}


def test_amd_pods_get_their_own_nodes_gids_for_runtimes_that_keep_the_hosts_group():
    """A registered cluster's containerd may not set the option: the pods' supplemental groups are
    then what the nodes reported (the union where two nodes of a group differ)."""
    nodes = [Node("mi-a", "10.0.0.1", "u", facts={**ROCM_FACTS, "device_groups": {"video": 44, "render": 992}}),
             Node("mi-b", "10.0.0.2", "u", facts={**ROCM_FACTS, "device_groups": {"video": 44, "render": 110}})]
    groups = groups_from_nodes(nodes)
    assert [g.device_gids for g in groups] == [(44, 110, 992)]
    assert NodeGroup.from_dict(groups[0].to_dict()) == groups[0]
    cluster = Cluster(name="dc", kind="kubernetes", config={"pod_security_enforce": "restricted"})
    pods = [pod for _, pod in pod_specs(_amd_job(groups, cluster))]
    assert all(p["securityContext"]["supplementalGroups"] == [44, 110, 992] for p in pods)
    assert all(violations(p, "restricted") == [] for p in pods)
    # no facts: the cluster's setting, else Ubuntu's 44/109
    bare = [NodeGroup("amd", 8, ("mi-a", "mi-b"))]
    custom = Cluster(name="dc", kind="kubernetes", config={"amd_device_gids": [39, 105]})
    assert {tuple(p["securityContext"]["supplementalGroups"]) for _, p in pod_specs(_amd_job(bare, custom))} \
        == {(39, 105)}
