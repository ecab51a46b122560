"""k3s starts after the WireGuard interface it binds to (issue 41 item 11).

systemd.unit(5): Wants= pulls a unit in, After= orders the start; with neither, k3s starts at
boot before wg-quick@IFACE has made the interface its node-ip and flannel-iface name, and
restart-loops (Restart=always, RestartSec=5s) until it exists. wg-quick@.service is the unit
wireguard-tools ships (wg-quick(8)); core.bootstrap.wireguard_boot enables it per interface.
"""

from __future__ import annotations

import pytest

from core.bootstrap import k3s
from core.bootstrap.plan import ClusterPlan, NodeSpec


def _unit_section(text: str) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("["):
            section = line
        elif section == "[Unit]" and "=" in line:
            key, _, value = line.partition("=")
            fields.setdefault(key, []).extend(value.split())
    return fields


@pytest.mark.parametrize("role", ["server", "agent"])
def test_k3s_wants_and_starts_after_the_mesh_and_containerd(role):
    plan = ClusterPlan("up", [NodeSpec("gpu0", "198.51.100.10", "server")])
    assert plan.vpn
    unit = _unit_section(k3s.render_unit(plan, role))
    mesh = f"wg-quick@{plan.interface}.service"
    for key in ("Wants", "After"):
        assert {mesh, "containerd.service", "network-online.target"} <= set(unit[key]), key


def test_without_the_mesh_k3s_waits_for_no_wireguard_unit():
    plan = ClusterPlan("up", [NodeSpec("gpu0", "198.51.100.10", "server")], vpn=False)
    unit = _unit_section(k3s.render_unit(plan, "server"))
    assert not any(v.startswith("wg-quick@") for v in unit["Wants"] + unit["After"])
