"""A node's status from its facts: AVAILABLE, IN_CLUSTER, UNREACHABLE or BLOCKED (why)."""

from __future__ import annotations

import enum

SUPPORTED_ARCH = ("x86_64", "aarch64", "arm64")


class NodeStatus(str, enum.Enum):
    AVAILABLE = "AVAILABLE"
    IN_CLUSTER = "IN_CLUSTER"
    UNREACHABLE = "UNREACHABLE"
    BLOCKED = "BLOCKED"


def blockers(facts: dict, in_cluster: bool = False) -> list[str]:
    """Each reason the node cannot join a new cluster, in words that say what to do.

    What geotrain itself installs (WireGuard on 51820, k3s) is no blocker on a node
    already in one of its clusters.
    """
    found = []
    arch = facts.get("system", {}).get("arch", "")
    if arch and arch not in SUPPORTED_ARCH:
        found.append(f"unsupported architecture {arch}: geotrain needs x86_64 or aarch64")
    docker = facts.get("docker", {})
    if docker.get("engine"):
        found.append("a Docker engine is installed (" + "; ".join(docker.get("evidence", [])) +
                     "): geotrain runs its own containerd — remove docker-ce/docker.io or use "
                     "another server (a docker CLI alone is fine)")
    sudo = facts.get("sudo", {})
    if sudo and not sudo.get("passwordless"):
        why = "has no sudo" if sudo.get("sudo") == "no-sudo" else "needs a password for sudo"
        found.append(f"user {sudo.get('user', '?')} {why}: allow passwordless sudo "
                     "(`USER ALL=(ALL) NOPASSWD:ALL`) or import as root")
    if not in_cluster:
        if not facts.get("udp_51820", {}).get("free", True):
            found.append("UDP port 51820 is in use: WireGuard needs it — stop what listens there")
        k3s = facts.get("k3s", {})
        if k3s.get("installed") or k3s.get("other_kubelet"):
            found.append("Kubernetes is already installed (k3s or a kubelet): uninstall it "
                         "(e.g. /usr/local/bin/k3s-uninstall.sh) or use another server")
    return found


def status_for(facts: dict, cluster: str | None) -> tuple[str, list[str]]:
    """(status, blockers) for a node that answered."""
    found = blockers(facts, in_cluster=bool(cluster))
    if cluster:
        return NodeStatus.IN_CLUSTER.value, found
    return (NodeStatus.BLOCKED.value if found else NodeStatus.AVAILABLE.value), found
