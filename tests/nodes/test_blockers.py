"""The one blocker policy (core/nodes/blockers.py), judged by node status and preflight alike.

Facts come from the recorded test host (tests/nodes/fixtures/host_debian12_testhost.txt),
changed one family at a time to make each rule fire.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from core.bootstrap import preflight
from core.bootstrap.plan import ClusterPlan, NodeSpec, NodeTarget
from core.nodes import blockers
from core.nodes import facts as node_facts
from core.nodes.status import status_for

FIXTURES = Path(__file__).parent / "fixtures"
CLEAN = node_facts.parse_all((FIXTURES / "host_debian12_testhost.txt").read_text())


@pytest.fixture
def found() -> dict:
    return copy.deepcopy(CLEAN)


def _preflight(facts: dict, role: str = "agent", member: bool = False) -> list[str]:
    plan = ClusterPlan("c", [NodeSpec("s", "10.0.0.1", role="server"), NodeSpec("a", "10.0.0.2")])
    spec = plan.nodes[0] if role == "server" else plan.nodes[1]
    target = NodeTarget(spec, session=None, state={"steps_done": ["preflight"]} if member else {})
    return preflight.blockers(plan, target, facts)


def test_the_recorded_test_host_passes_both(found):
    assert blockers.blockers(found) == [] and _preflight(found, "server") == []


def test_an_installed_kubernetes_blocks_a_new_node_but_not_a_member(found):
    found["k3s"] = {"installed": True, "version": "v1.30.2+k3s1", "data_dir": True,
                    "other_kubelet": False}
    (reason,) = status_for(found, None)[1]
    assert reason.startswith("Kubernetes is already installed") and _preflight(found) == [reason]
    assert status_for(found, "c") == ("IN_CLUSTER", []) and _preflight(found, member=True) == []


def test_a_port_held_by_another_program_blocks_by_role(found):
    found["listening"] = [("tcp", 6443, "kube-apiserver"), ("tcp", 10250, "kubelet-x")]
    assert _preflight(found, "server") == [
        "tcp port 10250 (kubelet) is taken by kubelet-x: free it or pick another node",
        "tcp port 6443 (Kubernetes API) is taken by kube-apiserver: free it or pick another node"]
    assert len(_preflight(found, "agent")) == 1  # an agent serves no API
    assert len(status_for(found, None)[1]) == 1  # the pool judges for any member (an agent)


def test_a_socket_without_process_on_the_wireguard_port(found):
    """The kernel's (or another user's) socket on 51820 blocks unless our interface is up;
    one on flannel's port is flannel's own VXLAN."""
    found["listening"] = [("udp", 51820, ""), ("udp", 8472, "")]
    assert status_for(found, None)[1] == [
        "udp port 51820 (WireGuard) is in use: free it or pick another node"]
    found["wireguard"]["interfaces"] = ["wg-geotrain"]
    assert blockers.blockers(found) == [] and _preflight(found) == []
    found["listening"] = [("udp", 51820, "wireguard-go")]  # our daemon from an earlier deploy
    found["wireguard"]["interfaces"] = []
    assert _preflight(found) == []


def test_small_var_lib_non_linux_and_odd_architecture(found):
    found["disk"]["var_lib_free_gb"] = 2.5
    found["system"].update(system="Darwin", arch="ppc64le")
    assert status_for(found, None)[1] == [
        "not Linux (Darwin): use a Linux server",
        "unsupported architecture ppc64le: geotrain needs x86_64 or aarch64",
        "only 2.5 GB free under /var/lib (need 5): free some space"]
    assert _preflight(found) == status_for(found, None)[1]


def test_a_rule_appended_to_the_list_is_judged_by_both(found, monkeypatch):
    """How a new rule (e.g. a version floor) is added: one function in RULES."""
    def floor(facts: dict, ctx: blockers.Context) -> list[str]:
        return [f"too old for {ctx.k3s_version or 'any k3s'}"]

    monkeypatch.setattr(blockers, "RULES", blockers.RULES + [floor])
    assert status_for(found, None) == ("BLOCKED", ["too old for any k3s"])
    assert _preflight(found) == [f"too old for {ClusterPlan('c', []).k3s.version}"]
