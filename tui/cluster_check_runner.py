"""The app's reading of `clusters check` results (issue 43): the check itself and the kept result are
core.cluster_checks' (the CLI's service); here only what the Nodes view needs from every cluster's."""

from __future__ import annotations

from core.cluster_checks import last_check
from core.state.store import Store


def node_verdicts(store: Store) -> dict[str, tuple[str, dict]]:
    """Node name -> (cluster, the node's part of that cluster's last check), for the Nodes view."""
    from core.state.cluster_records import list_clusters

    found: dict[str, tuple[str, dict]] = {}
    for cluster in list_clusters(store):
        for node in (last_check(store, cluster.name) or {}).get("nodes") or []:
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                found[node["name"]] = (cluster.name, node)
    return found
