"""A node's status from its facts: AVAILABLE, IN_CLUSTER, UNREACHABLE or BLOCKED (why)."""

from __future__ import annotations

import enum

from core.nodes.blockers import Context, blockers


class NodeStatus(str, enum.Enum):
    AVAILABLE = "AVAILABLE"
    IN_CLUSTER = "IN_CLUSTER"
    UNREACHABLE = "UNREACHABLE"
    BLOCKED = "BLOCKED"


def status_for(facts: dict, cluster: str | None) -> tuple[str, list[str]]:
    """(status, blockers) for a node that answered.

    A node in one of geotrain's clusters already runs what geotrain installs (its k3s,
    WireGuard and kubelet ports): no blocker there, only what would stop it anyway.
    """
    ctx = Context(ours=True, ports=()) if cluster else Context()
    found = blockers(facts, ctx)
    if cluster:
        return NodeStatus.IN_CLUSTER.value, found
    return (NodeStatus.BLOCKED.value if found else NodeStatus.AVAILABLE.value), found
