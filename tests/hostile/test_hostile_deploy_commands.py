"""Every remote command of a 3-node cluster deploy (preflight, WireGuard mesh, network
matrix, kubeconfig fetch, teardown), rendered with hostile node names and edge-case hosts,
endpoints and keys, parses into exactly the arguments intended; and run by a real shell.

The commands are rendered by a dry run, so nothing needs k3s or WireGuard here. Then each
is run by /bin/sh inside a test host (its own /run, /etc/wireguard) with a PATH holding
only recorders (a stand-in for the node's programs, which cannot run here) plus the real
`touch`: the recorders log the argv the shell really passed, and an injection that got
through would create the canary file.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from core.bootstrap import teardown
from core.bootstrap.deploy import build_plan, deploy
from core.bootstrap.plan import ClusterPlan, NodeSpec, assign_mesh_ips
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import Result
from core.bootstrap.wireguard_mesh import dry_run_key
from core.errors import InvalidInput
from core.domain.records import Node
from core.state.node_records import add_nodes
from core.state.store import Store

PREFIX, SUBNET = "gthd", "10.234.0.0/24"
PROGRAMS = ("wg", "ip", "systemctl", "apt-get", "ctr", "wireguard-go", "mkdir", "mv", "rm",
            "cat", "sha256sum", "stat", "awk", "tail", "date", "grep", "xargs", "sleep",
            "setsid", "ss", "df", "nvidia-smi", "pgrep", "modprobe", "uname", "id", "k3s",
            "chmod", "head", "sed", "python3")
RECORDER = """#!/usr/bin/python3
import json, os, sys
with open({log!r}, "a") as out:
    out.write(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\\n")
"""


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOTRAIN_HOME", str(tmp_path / "home"))


@pytest.fixture
def canary(tmp_path):
    path = tmp_path / "canary"
    yield path
    assert not path.exists(), "an injected command ran"


def _plan(canary: Path, stub_dir: Path) -> ClusterPlan:
    """Hostile names (as a tampered state database could hold: import refuses them),
    and the edge cases that are valid: IPv6, DNS names, a NAT endpoint with a port."""
    names = [f"n0;touch {canary.name}", f"n1$(touch {canary.name})",
             f"n2`touch {canary.name}`\n x"]  # relative: commands run in the canary's folder
    hosts = ["2001:db8::3", "gpu-1.example.com", "198.51.100.7"]
    add_nodes(Store(), [Node(name=n, host=h, username="root") for n, h in zip(names, hosts)])
    specs = [NodeSpec(n, h, "server" if i == 0 else "agent") for i, (n, h) in
             enumerate(zip(names, hosts))]
    specs[2].endpoint = "[2001:db8::10]:51999"
    plan = ClusterPlan("c1", specs)
    plan.k3s.bin_dir = str(stub_dir)  # kubectl calls land on a recorder too
    assign_mesh_ips(plan.subnet, plan.nodes)
    return plan


class AgreeingShell:
    """Stands in for a node during teardown rendering: every command succeeds, silently."""

    def run(self, command: str, timeout: float = 60, sudo: bool = False) -> Result:
        return Result(0)

    def put(self, data: bytes, remote_path: str, mode: int = 0o644, sudo: bool = False) -> None:
        pass


def _commands(plan: ClusterPlan) -> list[tuple[str, str]]:
    """(node, command) of a deploy's steps in our area and of a teardown, rendered."""
    done = deploy(plan, only=["preflight", "wireguard", "netmatrix", "kubeconfig"], dry_run=True)
    assert done.summary.ok, done.summary.lines()
    names = [n.name for n in plan.nodes]
    forget = [Phase(f"forget {n}", teardown._server_forgets(n), teardown._on({names[0]}))
              for n in names[1:]]
    # teardown asks the server whether each node is known before deleting it: a shell that
    # says yes to every command renders those deletes (a dry run answers no)
    undone = deploy(plan, steps=[Step("delete", [Phase("undo", teardown._undo(False))] + forget)],
                    shell_factory=lambda node: AgreeingShell(), record=False)
    assert undone.summary.ok, undone.summary.lines()
    configs = [r.content for r in done.command_log.records
               if r.kind == "put" and r.command.split()[1] == "/etc/wireguard/wg-geotrain.conf"]
    assert len(configs) == 3
    for text in configs:  # wg-quick runs PostUp as root at boot: only the lines we wrote
        keys = [line.split(" = ")[0] for line in text.splitlines()
                if line and not line.startswith(("#", "["))]
        assert set(keys) <= {"Address", "ListenPort", "MTU", "PostUp", "PublicKey", "Endpoint",
                             "AllowedIPs", "PersistentKeepalive"} and keys.count("PostUp") == 1
    assert "Endpoint = [2001:db8::10]:51999" in configs[0]
    assert "Endpoint = [2001:db8::3]:51820" in configs[1]
    return [(r.node, r.command) for log in (done.command_log, undone.command_log)
            for r in log.records if r.kind != "put"]


def test_every_remote_command_parses_and_runs_as_intended(make_test_hosts, tmp_path, canary):
    (host,) = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    stubs, calls = tmp_path / "stubs", tmp_path / "calls.jsonl"
    stubs.mkdir()
    for name in PROGRAMS:
        (stubs / name).write_text(RECORDER.format(log=str(calls)))
        (stubs / name).chmod(0o755)
    (stubs / "touch").symlink_to("/usr/bin/touch")  # real: an injection would leave the canary
    plan = _plan(canary, stubs)
    commands = _commands(plan)
    assert len(commands) > 40
    for node, command in commands:
        words = shlex.split(command)  # balanced quoting
        names = {n.name for n in plan.nodes}
        # a hostile name reaches a command only as one whole, quoted argument
        assert all(w in names for w in words if canary.name in w), command
        host.run(f"cd {tmp_path} && PATH={stubs}; export PATH; {command}", check=False, timeout=60)
    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    keys = {spec.name: dry_run_key(spec.name) for spec in plan.nodes}
    peers = {  # what each node's `wg set` must say about each other node, argument by argument
        plan.nodes[0].name: ["peer", keys[plan.nodes[0].name], "endpoint", "[2001:db8::3]:51820",
                             "allowed-ips", "10.99.0.1/32", "persistent-keepalive", "0"],
        plan.nodes[1].name: ["peer", keys[plan.nodes[1].name], "endpoint",
                             "gpu-1.example.com:51820", "allowed-ips", "10.99.0.2/32",
                             "persistent-keepalive", "0"],
        plan.nodes[2].name: ["peer", keys[plan.nodes[2].name], "endpoint", "[2001:db8::10]:51999",
                             "allowed-ips", "10.99.0.3/32", "persistent-keepalive", "0"]}
    peer_sets = [a[1:] for a in argvs if a[:3] == ["wg", "set", "wg-geotrain"] and a[3] == "peer"
                 and "endpoint" in a]
    expected = [["wg-geotrain"] + [x for n in plan.nodes if n.name != me.name for x in peers[n.name]]
                for me in plan.nodes]
    assert sorted(map(tuple, peer_sets)) == sorted(map(tuple, [["set"] + e for e in expected]))
    assert sorted(a for a in argvs if a[:3] == ["ip", "addr", "add"]) == [
        ["ip", "addr", "add", f"10.99.0.{i}/24", "dev", "wg-geotrain"] for i in (1, 2, 3)]
    names = [n.name for n in plan.nodes]
    deleted = [a[-2] for a in argvs if a[:2] == ["k3s", "kubectl"] and "delete" in a]
    assert deleted == [plan.nodes[1].name, plan.nodes[2].name]  # each name one argument, as is
    assert not any(canary.name in arg for argv in argvs for arg in argv
                   if argv[:2] != ["k3s", "kubectl"])
    for name in names:  # through the way a deploy is planned, the same names are refused
        with pytest.raises(InvalidInput, match="is not valid") as err:
            build_plan(Store(), "c2", [name])
        assert "\n" not in err.value.message
