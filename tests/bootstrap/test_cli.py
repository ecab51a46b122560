"""`geotrain clusters deploy|delete|add-node|remove-node|import-kubeconfig` from the outside."""

from __future__ import annotations

from pathlib import Path

import yaml

from core.bootstrap.deploy import build_plan, deploy
from core.bootstrap.kubeconfig import cluster_kubeconfig_path, rewrite, write_private
from core.cli import main
from core.cli.cluster_bootstrap import _report
from core.state.cluster_records import list_clusters, save_cluster
from core.domain.records import Cluster, Node
from core.state.node_records import add_nodes, get_node
from core.state.store import Store
from tests.bootstrap.cluster_hosts import PREFIX, SUBNET, ShellFactory, add_host_nodes, peers_of

K3S_YAML = (Path(__file__).parent / "fixtures" / "k3s.yaml").read_text()  # as k3s writes it


def _nodes():
    add_nodes(Store(), [Node(name=f"n{i}", host=f"198.51.100.{i + 1}", username="ubuntu")
                        for i in range(3)])


def test_dry_run_prints_every_command_per_node_and_changes_nothing(geotrain_home, capsys):
    _nodes()
    assert main(["clusters", "deploy", "c1", "--nodes", "n0,n1,n2", "--dry-run",
                 "--only", "wireguard,k3s"]) == 0
    out = capsys.readouterr().out
    assert out.count("== n") == 3 and "== n0 (server) ==" in out
    assert "[wireguard] change: wireguard-go wg-geotrain" in out
    assert "ip addr add 10.99.0.2/24 dev wg-geotrain" in out
    assert "[k3s] put: put /etc/rancher/k3s/geotrain-token mode 600" in out
    assert "(secret, not shown)" in out
    assert [c.name for c in list_clusters(Store())] == ["local"]  # nothing recorded


def test_bad_input_says_what_to_do(geotrain_home, capsys):
    _nodes()
    cases = [
        (["clusters", "deploy", "c1", "--nodes", "n0,nope"], "no node named 'nope'"),
        (["clusters", "deploy", "c1", "--nodes", "n0", "--subnet", "10.1.2.3/24"], "CIDR"),
        (["clusters", "deploy", "c1", "--nodes", "n0", "--only", "k8s"], "unknown step 'k8s'"),
        (["clusters", "deploy", "c1", "--nodes", "n0", "--endpoint", "n0"], "NODE=HOST[:PORT]"),
        (["clusters", "deploy", "local", "--nodes", "n0"], "is a local cluster"),
        (["clusters", "delete", "ghost"], "no cluster named 'ghost'"),
        (["clusters", "import-kubeconfig", "ghost"], "no cluster named 'ghost'"),
        (["clusters", "remove-node", "local", "n0"], "not in cluster 'local'"),
        (["clusters", "add-node", "ghost", "n0"], "no cluster named 'ghost'"),
        (["clusters", "deploy", "c1", "--nodes", "n0,n1,n0"], "'n0' is listed twice"),
        (["clusters", "deploy", "c1", "--nodes", "n0", "--endpoint", "n2=1.2.3.4"],
         "'n2', which is not one of the nodes"),
        (["clusters", "deploy", "c1", "--nodes", "n0", "--k3s-bundle", "/nonexistent"],
         "has no k3s binary"),
        (["clusters", "deploy", "c1", "--nodes", "n0", "--volcano-manifest", "/nonexistent"],
         "is not a file"),
        (["clusters", "deploy", "c1", "--nodes", ""], "no nodes given"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert [c.name for c in list_clusters(Store())] == ["local"]


def test_node_in_another_cluster_is_refused(geotrain_home, capsys):
    _nodes()
    store = Store()
    save_cluster(store, Cluster(name="other", kind="geotrain"), create=True)
    with store.write() as conn:
        conn.execute("UPDATE nodes SET cluster='other' WHERE name='n1'")
    assert main(["clusters", "deploy", "c1", "--nodes", "n0,n1", "--dry-run"]) == 2
    assert "remove-node other n1" in capsys.readouterr().err


def _stored_cluster(name: str) -> None:
    path = cluster_kubeconfig_path(name)
    write_private(path, rewrite(K3S_YAML, name, "https://198.51.100.1:6443"))
    save_cluster(Store(), Cluster(name=name, kind="geotrain", kubeconfig_path=str(path)))


def test_kubeconfig_is_rewritten_and_private(geotrain_home):
    _stored_cluster("wan")
    path = cluster_kubeconfig_path("wan")
    data = yaml.safe_load(path.read_text())
    assert data["clusters"][0] == {"cluster": {"certificate-authority-data": "Q0EK",
                                               "server": "https://198.51.100.1:6443"},
                                   "name": "wan"}
    assert data["current-context"] == "wan" and data["users"][0]["name"] == "wan"
    assert path.stat().st_mode & 0o777 == 0o600


def test_import_kubeconfig_merges_with_a_backup_and_never_overwrites(geotrain_home, tmp_path,
                                                                      capsys):
    _stored_cluster("wan")
    target = tmp_path / "kube" / "config"
    target.parent.mkdir()
    mine = {"apiVersion": "v1", "kind": "Config", "current-context": "work",
            "clusters": [{"name": "work", "cluster": {"server": "https://10.0.0.1"}}],
            "users": [{"name": "work", "user": {"token": "abc"}}],
            "contexts": [{"name": "work", "context": {"cluster": "work", "user": "work"}}]}
    target.write_text(yaml.safe_dump(mine))
    assert main(["clusters", "import-kubeconfig", "wan", "--kubeconfig-path", str(target)]) == 0
    assert "backup" in capsys.readouterr().out
    merged = yaml.safe_load(target.read_text())
    assert [c["name"] for c in merged["clusters"]] == ["work", "wan"]
    assert merged["current-context"] == "work"
    [backup] = list(target.parent.glob("config.backup-*"))
    assert yaml.safe_load(backup.read_text()) == mine
    # again: nothing to do
    assert main(["clusters", "import-kubeconfig", "wan", "--kubeconfig-path", str(target)]) == 0
    assert "nothing to do" in capsys.readouterr().out
    # a different `wan` already there: refused, file untouched, until --force
    merged["clusters"][1]["cluster"]["server"] = "https://elsewhere:6443"
    target.write_text(yaml.safe_dump(merged))
    before = target.read_text()
    assert main(["clusters", "import-kubeconfig", "wan", "--kubeconfig-path", str(target)]) == 2
    assert "--force" in capsys.readouterr().err and target.read_text() == before
    assert main(["clusters", "import-kubeconfig", "wan", "--kubeconfig-path", str(target),
                 "--force"]) == 0
    assert yaml.safe_load(target.read_text())["clusters"][1]["cluster"]["server"] == \
        "https://198.51.100.1:6443"
    backups = sorted(target.parent.glob("config.backup-*"))
    assert len(backups) == 2 and yaml.safe_load(backups[0].read_text()) == mine


def test_deploy_through_the_cli_on_imported_nodes(make_test_hosts, geotrain_home, capsys,
                                                  monkeypatch):
    """The whole headless path: nodes imported with pinned keys, then deployed by name."""
    monkeypatch.setenv("GEOTRAIN_PUBLIC_IP_URLS", "")  # no internet: skip the public-IP probe
    hosts = make_test_hosts(3, prefix=PREFIX, subnet=SUBNET)
    for host in hosts:
        assert main(["nodes", "import-ssh", "--name", host.name, "--endpoint", host.endpoint,
                     "--username", "root", "--ssh-key-path", host.key_path,
                     "--trust-host-key", host.fingerprint]) == 0
    argv = ["clusters", "deploy", "pair", "--nodes", f"{hosts[0].name},{hosts[1].name}",
            "--subnet", "10.203.0.0/24", "--only", "preflight,containerd,wireguard"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"[{hosts[1].name}] wireguard: ok" in out and "Summary:" in out
    assert "pinged 1 peer(s)" in out
    assert main(argv) == 0  # converged: a second run changes nothing and still succeeds
    assert main(["clusters", "add-node", "pair", hosts[2].name,
                 "--only", "preflight,containerd,wireguard"]) == 0
    assert "pinged 2 peer(s)" in capsys.readouterr().out
    assert all(len(peers_of(h)) == 2 for h in hosts)
    assert main(["clusters", "show", "pair", "--json"]) == 0
    shown = capsys.readouterr().out
    assert '"kind": "geotrain"' in shown and '"status": "READY"' in shown
    assert main(["clusters", "delete", "pair"]) == 2  # a script must say --yes
    said = capsys.readouterr()
    assert "and /var/lib/geotrain (dataset cache" in said.out and "pass --yes" in said.err
    assert all(h.run("ip link show wg-geotrain", check=False).returncode == 0 for h in hosts)
    assert main(["clusters", "delete", "pair", "--yes"]) == 0
    assert "cluster pair deleted" in capsys.readouterr().out
    assert all(h.run("ip link show wg-geotrain", check=False).returncode != 0 for h in hosts)


def test_blockers_are_one_table_before_anything_changes(make_test_hosts, geotrain_home,
                                                        capsys):
    hosts = make_test_hosts(2, prefix=PREFIX, subnet=SUBNET)
    hosts[1].run("setsid -f /usr/bin/python3 -c 'import socket,time; s=socket.socket(socket.AF_INET,"
                 " socket.SOCK_DGRAM); s.bind((\"0.0.0.0\", 51820)); time.sleep(120)'"
                 " </dev/null >/dev/null 2>&1")
    store = Store()
    names = add_host_nodes(store, hosts)
    plan = build_plan(store, "blk", names)
    plan.k3s.sha256 = {"k3s": "ab" * 32}  # k3s's hash given: only the taken port blocks
    result = deploy(plan, shell_factory=ShellFactory(hosts), store=store)
    assert result.summary.blocked and [f.node for f in result.summary.failures] == [names[1]]
    assert "udp port 51820 (WireGuard) is taken by python3" in result.summary.failures[0].message
    assert result.command_log.changes() == []  # not even the healthy node was touched
    assert [c.name for c in list_clusters(store)] == ["local"]
    assert all(get_node(store, n).status == "AVAILABLE" for n in names)
    assert _report(result) == 1
    out = capsys.readouterr().out
    assert "Blockers (nothing was changed):" in out and f"{names[1]}  udp port 51820" in out
