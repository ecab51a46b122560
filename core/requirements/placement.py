"""Which machines a workspace will use, with facts fresh enough to judge: `local` is this
machine; on a Kubernetes cluster, the nodes its workers are placed on (the same placement
the manifest renderer uses), their facts from the node pool, refreshed over SSH when older
than FACTS_MAX_AGE_S."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from core.domain.records import Cluster, Node
from core.kubernetes.datacenter_tasks import place
from core.kubernetes.node_groups import cluster_groups
from core.requirements.local_machine import local_facts
from core.requirements.report import UNKNOWN, Finding
from core.state.node_records import list_nodes
from core.state.store import Store

FACTS_MAX_AGE_S = 15 * 60
Refresh = Callable[[list[str]], list[Node]]


@dataclass
class Machine:
    name: str
    facts: dict
    processes: int
    vendor: str  # "nvidia" | "amd" | "cpu"
    local: bool = False


def pool_refresh(store: Store) -> Refresh:
    """Facts gathered again over SSH by the node pool (which records them)."""
    def refresh(names: list[str]) -> list[Node]:
        from core.nodes.pool import NodePool

        return NodePool(store).refresh(names)
    return refresh


def machines(store: Store, cluster: Cluster, workers: int,
             refresh: Refresh | None = None, datacenters: int | None = None) -> tuple[list[Machine], list[Finding]]:
    if cluster.kind == "local":
        facts = local_facts()
        vendor = "nvidia" if facts["gpus"] else "cpu"
        return [Machine("local", facts, workers, vendor, local=True)], []
    pool = {n.name: n for n in list_nodes(store)}
    if cluster.config.get("node_groups") or not cluster.nodes:
        groups = cluster_groups(cluster)
    else:
        groups = cluster_groups(cluster, [pool[n] for n in cluster.nodes if n in pool])
    placed = [(g, host) for g, take in place(groups, workers, cluster.name, datacenters) for host in g.hostnames[:take]]
    findings = [Finding(host, "facts", "not in the node pool", "its facts (disk, memory, GPUs)",
                        "import it (`geotrain nodes add`) to have it checked", UNKNOWN)
                for _, host in placed if host not in pool]
    stale = [host for _, host in placed if host in pool
             and time.time() - float(pool[host].facts.get("gathered_at") or 0) > FACTS_MAX_AGE_S]
    if stale:
        for node in (refresh or pool_refresh(store))(stale):
            pool[node.name] = node
            if node.status == "UNREACHABLE":
                why = node.blockers[0] if node.blockers else "no answer"
                findings.append(Finding(node.name, "facts", f"stale; refresh failed: {why}",
                                        f"facts under {FACTS_MAX_AGE_S // 60} minutes old",
                                        f"check SSH to {node.name}, then `geotrain nodes refresh {node.name}`",
                                        UNKNOWN))
    return [Machine(host, pool[host].facts, g.slots, g.vendor) for g, host in placed if host in pool], findings
