"""Issue 38.12: a deleted workspace's checkpoint directory goes from every node of a cluster
geotrain built, and nothing beside it: the path is built from a job name matched whole, under
a checked node directory, and quoted (core.nodes.node_dirs, on real sshd test hosts); and
what a cluster's delete removes from its nodes and what it leaves is said."""

from __future__ import annotations

import subprocess

import pytest

from core.bootstrap import teardown
from core.errors import GeotrainError
from core.kubernetes.names import job_name
from core.nodes import node_dirs
from core.state.node_records import get_node
from core.state.store import Store
from tests.bootstrap.cluster_hosts import PREFIX, SUBNET, ShellFactory, add_host_nodes

BASE = "/var/lib/geotrain/checkpoints"


@pytest.mark.parametrize("job", ["gt-../../etc", "gt-a/..", "gt-a b", "gt-a;rm -rf /", "", "gt-",
                                 "gt-a-", "x-ws", "gt-" + "a" * 40, "gt-a\n", "gt-A", "gt-*"])
def test_a_job_name_that_is_not_whole_removes_nothing(job):
    def no_shell(node):
        raise AssertionError("nothing may reach a node")

    with pytest.raises(GeotrainError) as refused:
        node_dirs.remove_workspace_dir([object()], BASE, job, no_shell)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("base", ["/", "/var/lib", "/var/lib/geotrain/../../etc", "relative", "/etc/x"])
def test_a_base_that_is_not_a_node_directory_removes_nothing(base):
    with pytest.raises(GeotrainError):
        node_dirs.workspace_dir(base, "gt-ws")


@pytest.mark.parametrize("workspace_id", ["ws-1", "../../etc", "a b;rm -rf /", "Ω" * 50, "UPPER/.."])
def test_every_job_name_geotrain_makes_is_one_directory_under_the_base(workspace_id):
    path = node_dirs.workspace_dir(BASE, job_name(workspace_id))
    assert path.rsplit("/", 1) == [BASE, job_name(workspace_id)]


def test_only_the_workspace_directory_goes_from_every_node(make_test_hosts, geotrain_home):
    hosts = make_test_hosts(2, prefix=PREFIX, subnet=SUBNET)
    store = Store()
    nodes = [get_node(store, n) for n in add_host_nodes(store, hosts)]
    factory = ShellFactory(hosts)
    for host in hosts:
        host.run(f"mkdir -p {BASE}/gt-ws-a {BASE}/gt-ws-ab {BASE}/gt-ws-a-b && "
                 f"touch {BASE}/gt-ws-a/step-3.pt {BASE}/gt-ws-ab/step-1.pt")
    assert node_dirs.remove_workspace_dir(nodes, BASE, "gt-ws-a", factory) == []
    for host in hosts:
        assert host.run(f"ls -A {BASE}").stdout.split() == ["gt-ws-a-b", "gt-ws-ab"]
    # again: already gone is fine; a node that cannot be reached is named, one line
    subprocess.run(["ip", "link", "set", hosts[1].veth, "down"], check=True)  # off the network
    try:
        [failed] = node_dirs.remove_workspace_dir(nodes, BASE, "gt-ws-ab", factory)
    finally:
        subprocess.run(["ip", "link", "set", hosts[1].veth, "up"], check=True)
    assert failed.startswith(f"{hosts[1].name}: ") and "\n" not in failed
    assert hosts[0].run(f"ls -A {BASE}").stdout.split() == ["gt-ws-a-b"]
    assert hosts[1].run(f"ls -A {BASE}").stdout.split() == ["gt-ws-a-b", "gt-ws-ab"]


def test_a_cluster_delete_says_what_goes_and_what_stays():
    text = teardown.kept_text({"dataset_cache": "/srv/datasets"})
    assert "/var/lib/geotrain (dataset cache" in text and "/var/lib/rancher/k3s" in text
    assert "Kept: the cluster's dataset_cache /srv/datasets; workspaces' recovery.host_path" in text
    assert "dataset_cache" not in teardown.kept_text({"dataset_cache": "/var/lib/geotrain/ds"})


def test_a_share_mounted_below_the_node_data_survives_a_cluster_delete(make_test_hosts):
    """rm -rf crossed mount points: an NFS dataset share mounted under /var/lib/geotrain was
    emptied for every cluster using it (found by review). The teardown's own command, on a real
    host with a tmpfs standing in for the share."""
    [host] = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    command = teardown.node_data_removal()
    host.run("mkdir -p /var/lib/geotrain/datasets/share /var/lib/geotrain/pydeps && "
             "mount -t tmpfs tmpfs /var/lib/geotrain/datasets/share && "
             "touch /var/lib/geotrain/datasets/share/team.bin /var/lib/geotrain/pydeps/x.whl")
    try:
        assert host.run(command, check=False).returncode == 0
        assert host.run("ls -A /var/lib/geotrain/datasets/share").stdout.split() == ["team.bin"]
        assert host.run("ls -A /var/lib/geotrain").stdout.split() == ["datasets"]
    finally:
        host.run("umount /var/lib/geotrain/datasets/share", check=False)
    assert "mounted below /var/lib/geotrain" in teardown.kept_text({})
