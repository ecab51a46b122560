"""The step framework without SSH: fact parsers from recorded output, diffs, the runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.bootstrap import load_steps, preflight
from core.bootstrap.plan import (ClusterPlan, DeployContext, NodeSpec, NodeTarget,
                                 assign_mesh_ips)
from core.bootstrap.runner import Phase, Step, run_steps
from core.bootstrap.session import CommandLog, NodeSession, StepFailed, file_state
from core.bootstrap.wireguard_mesh import Peer, parse_interface, peer_changes
from core.errors import InvalidInput
from core.nodes import facts as node_facts
from core.nodes.status import status_for
from tests.bootstrap.local_shell import LocalShell

FIXTURES = Path(__file__).parent / "fixtures"
KEY_A, KEY_B, KEY_C = "A" * 43 + "=", "B" * 43 + "=", "C" * 43 + "="


def test_parse_interface_from_recorded_output():
    state = parse_interface((FIXTURES / "wg_interface.txt").read_text())
    assert state.exists and state.up and state.mtu == 1380
    assert state.addresses == ("10.203.0.1/24",)
    assert state.listen_port == 51820
    assert len(state.peers) == 2
    peer = state.peers["4jzqt4RZl0X8w6FYbsArDpAlWvvvESAxs/wDn2xN1lw="]
    assert (peer.endpoint, peer.allowed_ips, peer.keepalive) == ("10.202.0.12:51820",
                                                                  "10.203.0.3/32", 25)
    assert peer.handshake > 0
    assert state.peers["xe6WK4TqDj07gmXqqXf3RknUvEEqYWlyIonG67OhGQg="].keepalive == 0


def test_parse_interface_missing():
    state = parse_interface("@link\n@addr\n@pub\n@port\n@peers\n")
    assert not state.exists and state.peers == {} and state.listen_port == 0


def test_peer_changes_only_for_what_differs():
    want = {KEY_A: Peer(KEY_A, "1.2.3.4:51820", "10.0.0.1/32", keepalive=25),
            KEY_B: Peer(KEY_B, "1.2.3.5:51820", "10.0.0.2/32", keepalive=25)}
    assert peer_changes(dict(want), want) == ([], [])
    # a roamed endpoint (NAT) with a handshake is left alone; without one it is set again
    roamed = {**want, KEY_A: Peer(KEY_A, "9.9.9.9:4000", "10.0.0.1/32", 1000, 25)}
    assert peer_changes(roamed, want) == ([], [])
    stale = {**want, KEY_A: Peer(KEY_A, "9.9.9.9:4000", "10.0.0.1/32", 0, 25)}
    args, pending = peer_changes(stale, want)
    assert args[:2] == ["peer", KEY_A] and args[-1] == "25" and pending == []
    extra = {**want, KEY_C: Peer(KEY_C, "1.2.3.6:51820", "10.0.0.3/32", 5, 25)}
    assert peer_changes(extra, want) == (["peer", KEY_C, "remove"], [])
    # new peers start without keepalive; it is turned on once the mesh answers
    args, pending = peer_changes({}, want)
    assert args.count("peer") == 2 and args.count("persistent-keepalive") == 2
    assert args[args.index("persistent-keepalive") + 1] == "0" and pending == [KEY_A, KEY_B]


def test_node_facts_and_blockers_from_recorded_output():
    """The fact script's output on a test host (python3 on 51820, a kernel VXLAN socket on
    8472), judged by preflight and by node status alike (one rule set)."""
    facts = node_facts.parse_all((FIXTURES / "host_facts.txt").read_text())
    assert facts["system"]["system"] == "Linux" and facts["system"]["apt"]
    assert not facts["init"]["systemd"] and facts["addresses"] == ["127.0.0.1", "10.209.0.10"]
    assert ("udp", 51820, "python3") in facts["listening"]
    assert ("udp", 8472, "") in facts["listening"]  # the kernel's: never a blocker
    plan = ClusterPlan("c", [NodeSpec("a", "10.209.0.10", role="server")])
    target = NodeTarget(plan.nodes[0], session=None)
    found = preflight.blockers(plan, target, facts)
    assert found == ["udp port 51820 (WireGuard) is taken by python3: free it or pick another node"]
    assert status_for(facts, None) == ("BLOCKED", found)
    assert status_for(facts, "c") == ("IN_CLUSTER", [])  # our own WireGuard holds it there
    facts["docker"] = {"engine": True, "evidence": ["running dockerd"]}
    facts["disk"]["var_lib_free_gb"] = 1.0
    plan.image = "registry.example.com/team/recipes:2.0"  # the base floor, as the pool judges (default
    # images add their own size: tests/nodes/test_disk_floors.py)
    found = preflight.blockers(plan, target, facts)
    assert any("Docker engine" in b for b in found) and any("1.0 GB free" in b for b in found)
    assert status_for(facts, None)[1] == found


def test_dry_run_assumes_a_debian_systemd_node_and_keeps_the_pools_gpus(tmp_path):
    session = NodeSession("a", None, None, CommandLog(), [], dry_run=True)
    seeded = {"gpus": [{"vendor": "nvidia", "index": 0, "name": "H100"}]}
    target = NodeTarget(NodeSpec("a", "h"), session, facts=dict(seeded))
    facts = target.gather_facts()
    assert facts["init"]["systemd"] and facts["system"]["apt"] and facts["sudo"]["root"]
    assert facts["gpus"] == seeded["gpus"] and session.command_log.records == []


def test_the_fact_script_runs_once_per_node_per_deploy(tmp_path):
    """Preflight probes it in the first round trip; every later step reads the cache."""
    log = CommandLog()
    plan = ClusterPlan("c", [NodeSpec("a", "a")])
    target = NodeTarget(plan.nodes[0], _session("a", log, tmp_path))
    ctx = DeployContext(plan, {"a": target}, log)
    target.probed = target.session.probe(preflight.STEP.probe(ctx, target))
    first = target.gather_facts()
    assert target.gather_facts() is first and first["system"]["system"] == "Linux"
    assert len(target.session.shell.commands) == 1  # the probe round trip, nothing after it
    unprobed = NodeTarget(NodeSpec("b", "b"), _session("b", log, tmp_path))
    unprobed.gather_facts(), unprobed.gather_facts()
    assert len(unprobed.session.shell.commands) == 1


def test_mesh_addresses_are_stable_and_checked():
    nodes = [NodeSpec("a", "h1", mesh_ip="10.9.0.2"), NodeSpec("b", "h2"), NodeSpec("c", "h3")]
    assign_mesh_ips("10.9.0.0/24", nodes)
    assert [n.mesh_ip for n in nodes] == ["10.9.0.2", "10.9.0.1", "10.9.0.3"]
    with pytest.raises(InvalidInput, match="outside"):
        assign_mesh_ips("10.8.0.0/24", nodes)
    with pytest.raises(InvalidInput, match="CIDR"):
        assign_mesh_ips("10.9.0.1/24", [NodeSpec("d", "h4")])
    with pytest.raises(InvalidInput, match="no free address"):
        assign_mesh_ips("10.7.0.0/30", [NodeSpec(n, n) for n in "xyz"])


def test_unknown_step_is_refused():
    with pytest.raises(InvalidInput, match="unknown step 'k8s'"):
        load_steps(["k8s"])
    assert [s.name for s in load_steps(["wireguard", "preflight"])] == ["preflight", "wireguard"]
    assert "wireguard" not in [s.name for s in load_steps(None, vpn=False)]


def _session(name: str, log: CommandLog, tmp_path: Path) -> NodeSession:
    return NodeSession(name, LocalShell(), tmp_path / f"{name}.log", log, ["s3cret-token"],
                       sudo=False)


def test_probe_runs_many_facts_in_one_round_trip(tmp_path):
    log = CommandLog()
    session = _session("a", log, tmp_path)
    results = session.probe({"x": "echo one; echo two", "y": "printf no-newline", "z": "exit 3"})
    assert results["x"].stdout == "one\ntwo\n" and results["x"].ok
    assert results["y"].stdout.strip() == "no-newline" and results["y"].ok  # no run-on
    assert results["z"].exit_code == 3
    assert len(session.shell.commands) == 1 and all(r.kind == "fact" for r in log.records)


def test_ensure_file_writes_only_when_different(tmp_path):
    log = CommandLog()
    session = _session("a", log, tmp_path)
    path = str(tmp_path / "sub" / "conf")
    assert session.ensure_file(path, "hello\n", mode=0o600)
    assert Path(path).read_text() == "hello\n" and Path(path).stat().st_mode & 0o777 == 0o600
    changes = len(log.changes())
    assert not session.ensure_file(path, "hello\n", mode=0o600)
    assert len(log.changes()) == changes
    current = session.fact(file_state(path))
    assert session.ensure_file(path, "hello\n", mode=0o644, current=current)


def test_secret_files_and_values_never_reach_the_logs(tmp_path):
    log = CommandLog()
    session = _session("a", log, tmp_path)
    session.ensure_file(str(tmp_path / "token"), "s3cret-token\n", mode=0o600, secret=True)
    session.change("echo s3cret-token >/dev/null")
    session.close()
    text = (tmp_path / "a.log").read_text()
    assert "s3cret-token" not in text and "***" in text
    assert all("s3cret-token" not in (r.command + (r.content or "")) for r in log.records)


def test_one_node_failing_never_stops_the_others(tmp_path):
    log = CommandLog()
    plan = ClusterPlan("c", [NodeSpec(n, n) for n in ("a", "b", "c")])
    targets = {s.name: NodeTarget(s, _session(s.name, log, tmp_path)) for s in plan.nodes}
    events = []
    ctx = DeployContext(plan, targets, log, on_event=events.append)

    def work(ctx, target):
        target.session.change(f"echo {target.name} > {tmp_path}/{target.name}.out")
        if target.name == "b":
            raise StepFailed("disk on fire")
        return "ok"

    later = []
    steps = [Step("one", [Phase("work", work)]),
             Step("two", [Phase("more", lambda ctx, t: later.append(t.name))])]
    summary = run_steps(ctx, steps)
    assert {p.name for p in tmp_path.glob("*.out")} == {"a.out", "b.out", "c.out"}
    assert sorted(later) == ["a", "c"]
    assert [(f.node, f.step, f.phase, f.message) for f in summary.failures] == [
        ("b", "one", "work", "disk on fire")]
    assert "b: FAILED at one (work): disk on fire" in summary.lines()
    assert any(e.node == "b" and e.state == "failed" for e in events)
    assert {e.node for e in events if e.step == "two" and e.state == "done"} == {"a", "c"}


def test_a_gate_step_stops_everything(tmp_path):
    log = CommandLog()
    plan = ClusterPlan("c", [NodeSpec(n, n) for n in ("a", "b")])
    targets = {s.name: NodeTarget(s, _session(s.name, log, tmp_path)) for s in plan.nodes}
    ctx = DeployContext(plan, targets, log)

    def check(ctx, target):
        if target.name == "a":
            raise StepFailed("blocked")

    ran = []
    summary = run_steps(ctx, [Step("gate", [Phase("check", check)], gate=True),
                              Step("after", [Phase("x", lambda c, t: ran.append(t.name))])])
    assert summary.blocked and ran == []


def test_the_wizard_core_imports_no_ui_ssh_or_kubernetes_library():
    """Layering: the TUI shows events; only core/nodes/ssh.py speaks paramiko."""
    import ast

    root = Path(__file__).parents[2] / "core"
    files = list((root / "bootstrap").glob("*.py")) + [root / "cli" / "cluster_bootstrap.py"]
    banned = {"textual", "rich", "paramiko", "kubernetes", "tui"}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not {n.split(".")[0] for n in names} & banned, (path.name, names)
    assert len(files) > 15
