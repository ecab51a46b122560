"""What hardware a Kubernetes cluster offers, as node groups, and how workers fill them.

A Volcano job gets one task per group of alike nodes (NVIDIA, AMD, CPU; amd64 or arm64:
a task never mixes architectures, since its pods share one image), so the
manifest renderer needs to know the groups; they come from node facts (clusters the
wizard built) or from the node list read when a cluster was registered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from core.domain.architectures import ARCH_LABEL, DEFAULT_ARCH, node_arch
from core.domain.datacenters import ZONE_LABEL, check_datacenter
from core.errors import InvalidInput
from core.domain.records import Cluster, Node

VENDORS = ("nvidia", "amd", "cpu")  # fill order: GPUs first
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


@dataclass(frozen=True)
class NodeGroup:
    """Alike nodes: the same GPU vendor, GPU count per node and CPU architecture, in the same
    datacenter."""

    vendor: str  # "nvidia" | "amd" | "cpu"
    gpus: int  # per node; 0 for cpu
    hostnames: tuple[str, ...]  # Kubernetes node names (kubernetes.io/hostname)
    datacenter: str | None = None  # the nodes' zone label (core.domain.datacenters)
    arch: str = DEFAULT_ARCH  # "amd64" | "arm64" (kubernetes.io/arch)
    device_gids: tuple[int, ...] = ()  # AMD: the nodes' video/render group ids, where known

    @property
    def slots(self) -> int:
        """Processes torchrun starts on one node of this group."""
        return max(self.gpus, 1)

    def to_dict(self) -> dict[str, Any]:
        data = {"vendor": self.vendor, "gpus": self.gpus, "nodes": list(self.hostnames), "arch": self.arch}
        if self.device_gids:
            data["device_gids"] = list(self.device_gids)
        return {**data, "datacenter": self.datacenter} if self.datacenter else data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NodeGroup":
        dc = data.get("datacenter")
        return cls(vendor=str(data["vendor"]), gpus=int(data.get("gpus", 0)),
                   hostnames=tuple(str(n) for n in data.get("nodes", ())),
                   datacenter=check_datacenter(str(dc), "recorded node group") if dc else None,
                   arch=check_arch(str(data.get("arch") or DEFAULT_ARCH), "recorded node group"),
                   device_gids=tuple(int(g) for g in data.get("device_gids") or ()))


def check_arch(arch: str, where: str) -> str:
    """An architecture name as Kubernetes writes it (GOARCH: amd64, arm64, ppc64le…), else a one-line
    error; which ones have an image is core.domain.images' question."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,15}", arch):
        raise InvalidInput(f"{where}: {arch[:40]!r} is not a CPU architecture name",
                           f"the node's {ARCH_LABEL} label should read e.g. amd64 or arm64")
    return arch


def _vendor_of_gpu(gpu: Any) -> str:
    text = " ".join(str(gpu.get(k, "")) for k in ("vendor", "name")) if isinstance(gpu, dict) \
        else str(gpu)
    text = text.lower()
    if "amd" in text or "instinct" in text or "radeon" in text:
        return "amd"
    return "nvidia"


def _group(members: Iterable[tuple[str, str, int, str | None, str, tuple[int, ...]]]) -> list[NodeGroup]:
    by_kind: dict[tuple[str, int, str, str], list[str]] = {}
    gids: dict[tuple[str, int, str, str], set[int]] = {}
    for host, vendor, gpus, dc, arch, device_gids in members:
        key = (vendor, gpus, dc or "", arch)
        by_kind.setdefault(key, []).append(host)
        gids.setdefault(key, set()).update(device_gids)
    order = sorted(by_kind, key=lambda k: (VENDORS.index(k[0]), -k[1], k[2], k[3]))
    return [NodeGroup(v, g, tuple(sorted(by_kind[key])), dc or None, arch, tuple(sorted(gids[key])))
            for key in order for v, g, dc, arch in [key]]


def groups_from_nodes(nodes: Iterable[Node]) -> list[NodeGroup]:
    """Groups from node records (facts["gpus"] is a list of {"name", "vendor"?})."""
    members = []
    for node in nodes:
        vendors = [_vendor_of_gpu(g) for g in node.facts.get("gpus") or []]
        vendor = "nvidia" if "nvidia" in vendors else ("amd" if vendors else "cpu")
        dc = check_datacenter(node.datacenter, f"node {node.name}") if node.datacenter else None
        arch = check_arch(node_arch(node.facts), f"node {node.name}")
        gids = tuple((node.facts.get("device_groups") or {}).values()) if vendor == "amd" else ()
        members.append((node.name, vendor, vendors.count(vendor) if vendors else 0, dc, arch, gids))
    return _group(members)


def groups_from_kubernetes(nodes: Iterable[dict[str, Any]]) -> list[NodeGroup]:
    """Groups from Kubernetes Node objects (allocatable nvidia.com/gpu or amd.com/gpu)."""
    members = []
    for node in nodes:
        spec = node.get("spec") or {}
        if spec.get("unschedulable"):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        vendor, gpus = "cpu", 0
        for name in ("nvidia", "amd"):
            count = int(str(allocatable.get(GPU_RESOURCE[name], "0")) or 0)
            if count > 0:
                vendor, gpus = name, count
                break
        labels, name = node["metadata"].get("labels") or {}, node["metadata"]["name"]
        zone = labels.get(ZONE_LABEL) or None
        # the kubelet's kubernetes.io/arch label, else status.nodeInfo.architecture (both GOARCH)
        arch = labels.get(ARCH_LABEL) or ((node.get("status") or {}).get("nodeInfo") or {}).get("architecture")
        members.append((name, vendor, gpus, check_datacenter(str(zone), f"node {name}") if zone else None,
                        check_arch(str(arch or DEFAULT_ARCH), f"node {name}"), ()))
    return _group(members)


def cluster_groups(cluster: Cluster, nodes: Iterable[Node] = ()) -> list[NodeGroup]:
    """The groups of a cluster: recorded at registration, else from its node records."""
    recorded = cluster.config.get("node_groups")
    if recorded:
        return [NodeGroup.from_dict(g) for g in recorded]
    groups = groups_from_nodes(nodes)
    if not groups:
        raise InvalidInput(f"cluster {cluster.name!r} has no known nodes",
                           "register it again with `geotrain clusters add-kubernetes` "
                           "so geotrain can read its node list")
    return groups


def allocate(groups: list[NodeGroup], workers: int, cluster_name: str) -> list[tuple[NodeGroup, int]]:
    """Place one worker per node, GPU groups first; refuses more workers than nodes."""
    total = sum(len(g.hostnames) for g in groups)
    if workers > total:
        raise InvalidInput(
            f"{workers} workers asked, but cluster {cluster_name!r} has {total} schedulable "
            f"node{'s' if total != 1 else ''}",
            f"use --workers {total} or fewer: each worker runs on its own node")
    placed, left = [], workers
    for group in groups:
        take = min(left, len(group.hostnames))
        if take:
            placed.append((group, take))
            left -= take
    return placed


def dist_backend(placed: list[tuple[NodeGroup, int]]) -> str:
    """nccl (RCCL on AMD) when every node has GPUs of one vendor; gloo otherwise."""
    vendors = {g.vendor for g, _ in placed}
    return "nccl" if len(vendors) == 1 and "cpu" not in vendors else "gloo"
