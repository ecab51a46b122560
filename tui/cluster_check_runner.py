"""The app's way to `clusters check` (issue 43): the same core calls and the same kept result as
`geotrain clusters check NAME` (settings 'cluster_check/NAME', core/cli/cluster_check.py), so the CLI's
`--last` and the app show one result. Runs in a thread worker; never touches widgets."""

from __future__ import annotations

import json

from core.errors import InvalidInput
from core.state.cluster_records import get_cluster
from core.state.store import LOCAL_CLUSTER, Store

SETTING = "cluster_check/{}"  # core.cli.cluster_check.SETTING (tui does not import core.cli)
APP_SECONDS = 3.0  # the burn-in per device, as the CLI's default


def last_check(store: Store, cluster: str) -> dict | None:
    """The kept result, or None (never checked, or a value this version cannot read)."""
    saved = store.get_setting(SETTING.format(cluster))
    try:
        result = json.loads(saved) if saved else None
    except ValueError:
        return None
    return result if isinstance(result, dict) and isinstance(result.get("nodes"), list) else None


def node_verdicts(store: Store) -> dict[str, tuple[str, dict]]:
    """Node name -> (cluster, the node's part of that cluster's last check), for the Nodes view."""
    from core.state.cluster_records import list_clusters

    found: dict[str, tuple[str, dict]] = {}
    for cluster in list_clusters(store):
        for node in (last_check(store, cluster.name) or {}).get("nodes") or []:
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                found[node["name"]] = (cluster.name, node)
    return found


def run_check(store: Store, cluster: str, seconds: float = APP_SECONDS, model: str = "gpt-neo",
              size: str | None = None, preset: str = "medium", progress=None) -> dict:
    """Check the cluster's devices and collective, keep the result, return it."""
    record = get_cluster(store, cluster)
    if record.kind != "local" and cluster != LOCAL_CLUSTER:
        raise InvalidInput(f"the app checks {LOCAL_CLUSTER!r} only so far; {cluster!r} is a {record.kind} cluster",
                           f"run `geotrain clusters check {cluster}` where it is supported")
    from core.backends.local.cluster_check import check_local
    from core.planner.cluster_inputs import default_size, model_params
    from core.planner.wan_what_if import exchange_for
    from core.domain import recipe_catalog

    payload = exchange_for(recipe_catalog.presets()[preset], model_params(model, size or default_size(model)))
    if progress:
        progress(f"{cluster}: burn-in of each device ({seconds:g} s), then an all-reduce of "
                 f"{payload.payload_bytes / 1e6:.0f} MB")
    result = check_local(seconds, payload.payload_bytes)
    store.set_setting(SETTING.format(cluster), json.dumps(result))
    return result
