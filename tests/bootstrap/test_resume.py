"""A host whose SSH is cut mid-deploy: the others finish, and a re-run completes the mesh."""

from __future__ import annotations

from core.bootstrap.deploy import build_plan, deploy
from core.state.cluster_records import get_cluster
from core.state.store import Store, loads
from tests.bootstrap.cluster_hosts import (MESH_SUBNET, PREFIX, SUBNET,
                                           CuttingShellFactory, ShellFactory, add_host_nodes,
                                           mesh_ping, peers_of)

ONLY = ["preflight", "containerd", "wireguard", "netmatrix"]


def _public_keys(store: Store) -> dict[str, str]:
    with store.read() as conn:
        rows = conn.execute("SELECT node, state FROM cluster_nodes WHERE cluster='cut'")
        return {r["node"]: loads(r["state"], {}).get("wg_public_key") for r in rows}


def test_cut_host_fails_alone_and_rerun_completes(make_test_hosts, geotrain_home):
    hosts = make_test_hosts(3, prefix=PREFIX, subnet=SUBNET)
    store = Store()
    names = add_host_nodes(store, hosts)
    victim = hosts[2]
    factory = CuttingShellFactory(hosts, victim, trigger="wireguard-go wg-geotrain")
    first = deploy(build_plan(store, "cut", names, subnet=MESH_SUBNET), only=ONLY,
                   shell_factory=factory, store=store)
    try:
        assert [(f.node, f.step, f.phase) for f in first.summary.failures] == [
            (victim.name, "wireguard", "interface")]
        assert victim.name in first.summary.lines()[2] and "FAILED" in first.summary.lines()[2]
        for name in names[:2]:
            assert first.summary.done[name] == ONLY  # the others finished every step
        assert "ok 10.203.0.2" in mesh_ping(hosts[0], ["10.203.0.2"])
        assert get_cluster(store, "cut").status == "DEGRADED"
        keys_before = _public_keys(store)
        victim_key = victim.run("wg pubkey < /etc/wireguard/geotrain.key").stdout.strip()
        assert keys_before[victim.name] == victim_key
    finally:
        for cut in factory.cuts:
            cut.restore()

    second = deploy(build_plan(store, "cut", names), only=ONLY,
                    shell_factory=ShellFactory(hosts), store=store)
    assert second.summary.ok, second.summary.lines()
    assert get_cluster(store, "cut").status == "READY"
    assert not any("genkey" in r.command for r in second.command_log.records)
    assert _public_keys(store) == keys_before
    assert victim.run("wg pubkey < /etc/wireguard/geotrain.key").stdout.strip() == victim_key
    mesh = ["10.203.0.1", "10.203.0.2", "10.203.0.3"]
    for index, host in enumerate(hosts):
        peers = peers_of(host)
        assert len(peers) == len(set(peers)) == 2
        others = [ip for i, ip in enumerate(mesh) if i != index]
        assert mesh_ping(host, others).count("ok ") == 2
    with store.read() as conn:
        assert conn.execute("SELECT COUNT(*) FROM net_matrix WHERE cluster='cut'").fetchone()[0] == 6
    # and now it is finished: nothing changes any more
    third = deploy(build_plan(store, "cut", names), only=ONLY,
                   shell_factory=ShellFactory(hosts), store=store)
    assert third.summary.ok and third.command_log.changes() == []
