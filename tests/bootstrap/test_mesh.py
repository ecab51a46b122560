"""A real 3-host cluster base over SSH: containerd, a wireguard-go mesh, the network matrix.

Root only: the hosts are network namespaces with real sshd (tests/testhosts.py). Later
tests build on the cluster the first one deploys (a module-scoped fixture).
"""

from __future__ import annotations

import pytest

from core.bootstrap.deploy import build_plan, deploy
from core.bootstrap.teardown import delete_cluster, remove_node
from core.state.cluster_records import get_cluster
from core.errors import NotFound
from core.state.node_records import get_node
from core.state.store import Store
from tests import testhosts
from tests.bootstrap.cluster_hosts import (MESH_SUBNET, PREFIX, ShellFactory, add_host_nodes,
                                           create, mesh_ping, peers_of)

ONLY = ["preflight", "containerd", "wireguard", "netmatrix"]
MESH = ["10.203.0.1", "10.203.0.2", "10.203.0.3"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = testhosts.skip_reason()
    if reason:
        pytest.skip(reason)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOTRAIN_HOME", str(tmp_path_factory.mktemp("home")))
        hosts = create(3)
        try:
            store = Store()
            names = add_host_nodes(store, hosts)
            plan = build_plan(store, "mesh", names, subnet=MESH_SUBNET)
            events = []
            result = deploy(plan, only=ONLY, shell_factory=ShellFactory(hosts), store=store,
                            on_event=events.append)
            yield {"hosts": hosts, "store": store, "names": names, "result": result,
                   "events": events, "home": tmp_path_factory.getbasetemp()}
        finally:
            testhosts.teardown(PREFIX)


def test_deploy_finishes_on_every_node(cluster):
    summary = cluster["result"].summary
    assert summary.ok, summary.lines()
    assert all(steps == ["preflight", "containerd", "wireguard", "netmatrix"]
               for steps in summary.done.values())
    record = get_cluster(cluster["store"], "mesh")
    assert record.kind == "geotrain" and record.status == "READY"
    assert record.nodes == cluster["names"]
    assert all(get_node(cluster["store"], n).status == "IN_CLUSTER" for n in cluster["names"])
    done = {(e.node, e.step) for e in cluster["events"] if e.state == "done"}
    assert len(done) == 12


def test_containerd_answers_ctr_version_on_each_host(cluster):
    for host in cluster["hosts"]:
        out = host.run("ctr --address /run/containerd/containerd.sock version").stdout
        assert "Server:" in out and "Version:" in out.split("Server:")[1]
        assert "SystemdCgroup = false" in host.run("cat /etc/containerd/config.toml").stdout


def test_every_pair_pings_over_the_mesh(cluster):
    for index, host in enumerate(cluster["hosts"]):
        others = [ip for i, ip in enumerate(MESH) if i != index]
        out = mesh_ping(host, others)
        assert sorted(line.split()[1] for line in out.splitlines() if line.startswith("ok ")) \
            == others, out
        assert len(peers_of(host)) == 2
        link = host.run("ip -o link show dev wg-geotrain").stdout
        assert "mtu 1380" in link
        handshakes = host.run("wg show wg-geotrain latest-handshakes").stdout.split()[1::2]
        assert all(int(h) > 0 for h in handshakes)


def test_private_keys_stay_on_their_node(cluster):
    records = cluster["result"].command_log.records
    for host in cluster["hosts"]:
        private = host.run("cat /etc/wireguard/geotrain.key").stdout.strip()
        assert oct(int(host.run("stat -c %a /etc/wireguard/geotrain.key").stdout, 8)) == "0o600"
        assert all(private not in r.command and private not in (r.content or "") for r in records)
        with cluster["store"].read() as conn:
            assert private not in str([tuple(r) for r in conn.execute("SELECT * FROM cluster_nodes")])
        logs = list(cluster["home"].rglob("*.log"))
        assert len(logs) >= 3 and all(private not in p.read_text() for p in logs)
        assert all(private not in e.message for e in cluster["events"])


def test_network_matrix_holds_six_measured_entries(cluster):
    with cluster["store"].read() as conn:
        rows = conn.execute("SELECT src, dst, latency_ms, mbit_s FROM net_matrix"
                            " WHERE cluster='mesh'").fetchall()
    assert len(rows) == 6
    assert {(r["src"], r["dst"]) for r in rows} == {
        (a, b) for a in cluster["names"] for b in cluster["names"] if a != b}
    assert all(r["latency_ms"] > 0 and r["mbit_s"] > 1 for r in rows)


def test_rerun_issues_no_changing_command(cluster):
    store = cluster["store"]
    plan = build_plan(store, "mesh", cluster["names"])
    result = deploy(plan, only=ONLY, shell_factory=ShellFactory(cluster["hosts"]), store=store)
    assert result.summary.ok, result.summary.lines()
    assert result.command_log.changes() == []
    assert all(r.kind == "fact" for r in result.command_log.records)


def test_remove_node_then_delete_cluster(cluster):
    store, hosts = cluster["store"], cluster["hosts"]
    factory = ShellFactory(hosts)
    # what pods leave on a node: the dataset cache, the recipes' packages, checkpoints (issue 38.12)
    left = "/var/lib/geotrain/datasets/c4 /var/lib/geotrain/pydeps/k /var/lib/geotrain/checkpoints/gt-a"
    for host in hosts:
        host.run(f"mkdir -p {left} && touch /var/lib/geotrain/checkpoints/gt-a/step-1.pt")
    result = remove_node("mesh", hosts[2].name, shell_factory=factory, store=store)
    assert result.summary.ok, result.summary.lines()
    assert get_cluster(store, "mesh").nodes == [hosts[0].name, hosts[1].name]
    assert get_node(store, hosts[2].name).status == "AVAILABLE"
    assert hosts[2].run("ip link show wg-geotrain", check=False).returncode != 0
    assert len(peers_of(hosts[0])) == 1 and len(peers_of(hosts[1])) == 1
    assert "ok 10.203.0.2" in mesh_ping(hosts[0], ["10.203.0.2"])

    result = delete_cluster("mesh", keep_packages=True, shell_factory=factory, store=store)
    assert result.summary.ok, result.summary.lines()
    with pytest.raises(NotFound):
        get_cluster(store, "mesh")
    for host in hosts[:2]:
        assert host.run("ip link show wg-geotrain", check=False).returncode != 0
        assert host.run("test -e /etc/wireguard/geotrain.key", check=False).returncode != 0
        assert host.run("ctr --address /run/containerd/containerd.sock --connect-timeout 1s"
                        " version", check=False).returncode != 0
    for host in hosts:  # the node that left, and the two of the deleted cluster
        assert host.run("ls -A /var/lib/geotrain").stdout == ""
    assert all(get_node(store, n).cluster is None for n in cluster["names"])
