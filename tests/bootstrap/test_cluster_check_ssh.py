"""`geotrain clusters check NAME` on three real sshd test hosts over a real wireguard-go mesh (issue 43).

Root only (network namespaces; tests/testhosts.py). The hosts share this machine's files, so the
check runs in the Python that has torch here (--python); nothing is written to the hosts. One link
(host 0 <-> host 2) is shaped with tbf on both hosts' interfaces for the other's underlay address
only (an htb class with a tbf
qdisc, the kernel here has no prio qdisc; a u32 filter sends just that traffic there), so exactly one link is slow:
the check must name it. The figures are printed (pytest -s), not asserted beyond their order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.bootstrap.check_over_ssh import NO_TORCH
from core.bootstrap.deploy import build_plan, deploy
from core.cluster_checks import last_check, run_check
from core.nodes.known_hosts import KnownHosts, host_label
from core.state.store import Store
from tests import testhosts
from tests.bootstrap.cluster_hosts import ShellFactory, add_host_nodes

PREFIX = "gtck"
SUBNET = "10.241.0.0/24"
MESH_SUBNET = "10.242.0.0/24"
SHAPED_MBIT = 40
ROOT = Path(__file__).resolve().parents[2]
TORCH_PYTHON = os.path.realpath(sys.executable)


def shape_link(one, two, mbit: int) -> None:
    """tbf on one's interface for traffic to two (and back): that link only."""
    for src, dst in ((one, two), (two, one)):
        for command in ("tc qdisc replace dev eth0 root handle 1: htb default 10",
                        "tc class add dev eth0 parent 1: classid 1:10 htb rate 10gbit",
                        f"tc class add dev eth0 parent 1: classid 1:20 htb rate {mbit}mbit",
                        f"tc qdisc add dev eth0 parent 1:20 handle 20: tbf rate {mbit}mbit burst 32kb latency 400ms",
                        f"tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst {dst.ip}/32 flowid 1:20"):
            src.run(command)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = testhosts.skip_reason()
    if reason:
        pytest.skip(reason)
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOTRAIN_HOME", str(home))
        hosts = testhosts.create_hosts(3, PREFIX, SUBNET)
        try:
            store = Store()
            names = add_host_nodes(store, hosts)
            with store.write() as conn:  # two datacenters: hosts 0 and 1 in ams, host 2 in fra
                conn.executemany("UPDATE nodes SET datacenter=? WHERE name=?",
                                 [("ams", names[0]), ("ams", names[1]), ("fra", names[2])])
            shape_link(hosts[0], hosts[2], SHAPED_MBIT)
            plan = build_plan(store, "ck", names, subnet=MESH_SUBNET)
            done = deploy(plan, only=["preflight", "wireguard", "netmatrix"], shell_factory=ShellFactory(hosts),
                          store=store)
            assert done.summary.ok, done.summary.lines()
            pins = KnownHosts()  # the CLI connects through the node pool: its host keys pinned as an import does
            for host in hosts:
                key_type, key = host.host_pubkey.split()[:2]
                pins.pin(host_label(host.ip, host.port), key_type, key)
            pins.save()
            yield {"hosts": hosts, "store": store, "names": names, "home": home}
        finally:
            testhosts.teardown(PREFIX)


def wireguard_bytes(host) -> int:
    """Bytes received and sent over the host's mesh interface, all peers (`wg show transfer`)."""
    lines = host.run("wg show wg-geotrain transfer").stdout.split("\n")
    return sum(int(v) for line in lines if line.strip() for v in line.split()[1:3])


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli", "clusters", "check", *args], cwd=ROOT,
                          env=dict(os.environ, GEOTRAIN_HOME=str(home)), capture_output=True, text=True, timeout=600)


def test_every_node_and_every_link_over_the_mesh_the_shaped_one_named(cluster):
    hosts, names = cluster["hosts"], cluster["names"]
    before = [set(host.run("ls -A /run/geotrain").stdout.split()) for host in hosts]
    carried = wireguard_bytes(hosts[0])
    done = cli(cluster["home"], "ck", "--seconds", "0.3", "--size", "25m", "--python", TORCH_PYTHON)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    result = last_check(cluster["store"], "ck")
    assert result["kind"] == "ssh" and result["ok"]
    assert [n["name"] for n in result["nodes"]] == names
    for node in result["nodes"]:
        assert node["ok"] and node["burn_in"] is None
        assert [d["device"] for d in node["devices"]] == ["cpu"] and node["devices"][0]["matmul_flops"] > 0
    links = {(link["a"], link["b"]): link for link in result["links"] if link["kind"] == "node"}
    between, = [link for link in result["links"] if link["kind"] == "datacenters"]
    # between the datacenters: the slower of host 2's two links (the shaped one), named with the pair it came from
    assert (between["name"], between["via"], between["links"]) == ("ams - fra (datacenters)", f"{names[0]} - {names[2]}", 2)
    assert set(links) == {(names[0], names[1]), (names[0], names[2]), (names[1], names[2])}
    assert all(link["ok"] and link["bytes"] == 3283236 and link["world"] == 2 for link in links.values())
    shaped = links[(names[0], names[2])]
    assert result["slow_link"] == shaped["name"] and shaped["slow"]
    assert not links[(names[0], names[1])]["slow"] and not links[(names[1], names[2])]["slow"]
    assert shaped["busbw"] < SHAPED_MBIT * 1e6 / 8  # tbf's rate is the ceiling of the shaped link
    assert all(link["ping_ms"] is not None and link["probe_mbit_s"] for link in links.values())
    # the all-reduces went through the mesh: host 0's WireGuard peers carried both its links' payloads
    assert wireguard_bytes(hosts[0]) - carried > 2 * 2 * 3283236
    assert f"slow link: {shaped['name']}" in done.stdout
    assert f"{shaped['name']}: slow:" in done.stdout
    shown = subprocess.run([sys.executable, "-m", "core.cli", "clusters", "show", "ck"], cwd=ROOT, capture_output=True,
                           text=True, env=dict(os.environ, GEOTRAIN_HOME=str(cluster["home"])), timeout=120).stdout
    print(shown)
    row = next(line.split() for line in shown.splitlines() if line.split()[:2] == [names[0], names[2]])
    assert float(row[4]) == float(f"{shaped['busbw'] / 1e9:.3g}")  # the all-reduce beside the ping matrix
    assert f"all good; slow link: {shaped['name']}" in shown
    node = subprocess.run([sys.executable, "-m", "core.cli", "nodes", "show", names[1]], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, GEOTRAIN_HOME=str(cluster["home"])), timeout=120).stdout
    assert any(line.startswith("check") and line.endswith(": ok") for line in node.splitlines()), node
    for host, had in zip(hosts, before):  # nothing written to the nodes; no check process left
        assert set(host.run("ls -A /run/geotrain").stdout.split()) <= had
        assert "from recipes import cluster_check" not in host.run("ps -eo args").stdout  # the stub's own line


def test_the_token_never_on_a_command_line_or_in_the_logs(cluster):
    """The store's token travels in the rank's stdin only: not in argv, the node logs, the kept result."""
    commands, documents = [], []

    class Watching(ShellFactory):
        def __call__(self, node):
            conn = super().__call__(node)
            real = conn.run

            def run(command, **kwargs):
                commands.append(command)
                if kwargs.get("stdin"):
                    documents.append(json.loads(kwargs["stdin"]))
                return real(command, **kwargs)
            conn.run = run
            return conn

    result = run_check(cluster["store"], "ck", seconds=0.1, size="tiny", python=TORCH_PYTHON,
                       shell_factory=Watching(cluster["hosts"]))
    assert result["ok"], result
    tokens = {d["token"] for d in documents if d["token"]}
    assert len(tokens) == 1 and len(next(iter(tokens))) == 64  # one fresh token for the check's links
    assert sum("--link" in d["argv"] for d in documents) == 6  # 3 pairs x 2 ranks
    token = tokens.pop()
    logs = "".join(p.read_text() for p in (cluster["home"] / "logs").rglob("*.log"))
    with cluster["store"].read() as conn:
        database = str([tuple(r) for r in conn.execute("SELECT * FROM settings")])
    assert all(token not in text for text in commands + [logs, database])


def test_a_node_without_torch_gets_one_line_not_a_failed_check(cluster):
    result = run_check(cluster["store"], "ck", seconds=0.1, size="tiny", python="/usr/bin/python3",
                       shell_factory=ShellFactory(cluster["hosts"]))
    assert all(node["burn_in"] == NO_TORCH and node["ok"] and node["devices"] == [] for node in result["nodes"])
    nodes, between = result["links"][:3], result["links"][3:]
    assert all(link["ok"] is None and link["why"].startswith("not measured: no torch on") for link in nodes)
    assert [(link["ok"], link["why"]) for link in between] == [(None, "no link between them was measured")]
    assert result["ok"] and result["slow_link"] is None


def test_an_unreachable_node_is_named_and_the_others_still_checked(cluster):
    hosts, names = cluster["hosts"], cluster["names"]
    hosts[1].stop_sshd()
    try:
        result = run_check(cluster["store"], "ck", seconds=0.1, size="tiny", python=TORCH_PYTHON,
                           shell_factory=ShellFactory(hosts))
    finally:
        hosts[1].restart_sshd()
    down = next(n for n in result["nodes"] if n["name"] == names[1])
    assert not result["ok"] and not down["ok"] and down["why"][0].startswith("not checked: facts: ")
    assert all(n["ok"] for n in result["nodes"] if n["name"] != names[1])
    assert [(link["a"], link["b"], link["ok"]) for link in result["links"] if link["kind"] == "node"] == [
        (names[0], names[2], True)]


def test_a_failing_link_is_named_with_both_ends_words(cluster, monkeypatch):
    """The store's port on host 1's mesh address is taken (a listening socket that hangs up on whoever
    calls; SO_REUSEADDR, as an earlier check's store may have left the port in TIME_WAIT): the link
    host 1 - host 2, whose first rank serves the store on host 1, fails; the others pass."""
    from core.bootstrap import check_over_ssh

    hosts, names = cluster["hosts"], cluster["names"]
    monkeypatch.setattr(check_over_ssh, "STORE_WAIT_S", 8)  # the second rank gives up sooner
    blocker = subprocess.Popen(
        ["nsenter", "-t", str(hosts[1].pid), "-n", sys.executable, "-c",
         "import socket, sys, threading\n"
         "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "s.bind(('10.242.0.2', 29531)); s.listen(8); print('bound', flush=True)\n"
         "threading.Thread(target=lambda: [s.accept()[0].close() for _ in iter(int, 1)], daemon=True).start()\n"
         "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert blocker.stdout.readline().strip() == "bound"
        result = run_check(cluster["store"], "ck", seconds=0.1, size="tiny", python=TORCH_PYTHON,
                           shell_factory=ShellFactory(hosts))
    finally:
        blocker.stdin.close()
        blocker.wait(timeout=30)
    links = {(link["a"], link["b"]): link for link in result["links"] if link["kind"] == "node"}
    failed = links[(names[1], names[2])]
    assert not failed["ok"] and f"{names[1]}: OSError: [Errno 98] Address already in use" in failed["why"]
    assert links[(names[0], names[1])]["ok"] and links[(names[0], names[2])]["ok"]
    assert not result["ok"] and result["why"] == [f"link {failed['name']}: {failed['why']}"]
    assert all(node["ok"] for node in result["nodes"])  # the link failed, not a node
