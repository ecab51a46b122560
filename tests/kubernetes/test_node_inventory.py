"""Node groups from node facts (as core.nodes.facts.gpus records them) and worker placement."""

from __future__ import annotations

import pytest

from core.errors import InvalidInput
from core.domain.records import Cluster, Node
from core.kubernetes.node_groups import allocate, cluster_groups, dist_backend, groups_from_nodes


def _node(name: str, *gpus: dict) -> Node:
    return Node(name=name, host=name, username="root", facts={"gpus": list(gpus)})


H100 = {"vendor": "nvidia", "index": 0, "name": "NVIDIA H100 80GB HBM3"}
MI300 = {"vendor": "amd", "index": 0, "name": "AMD Instinct MI300X"}


def test_groups_follow_vendor_and_gpu_count_gpus_first():
    nodes = [_node("cpu1"), _node("amd1", MI300, MI300), _node("h2", H100), _node("h1", H100),
             _node("both", H100, MI300)]
    groups = groups_from_nodes(nodes)
    assert [(g.vendor, g.gpus, g.hostnames) for g in groups] == [
        ("nvidia", 1, ("both", "h1", "h2")), ("amd", 2, ("amd1",)), ("cpu", 0, ("cpu1",))]
    placed = allocate(groups, 4, "dc")
    assert [(g.vendor, n) for g, n in placed] == [("nvidia", 3), ("amd", 1)]
    assert dist_backend(placed) == "gloo" and dist_backend(placed[:1]) == "nccl"


def test_a_cluster_without_known_nodes_is_a_clear_error():
    with pytest.raises(InvalidInput, match="cluster 'bare' has no known nodes"):
        cluster_groups(Cluster("bare", "kubernetes"))
