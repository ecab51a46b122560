"""`clusters check` results in the state store (settings 'cluster_check/NAME', one JSON document per
cluster, the last check's): kept by core.cluster_checks, read by the CLI, the app and the planner."""

from __future__ import annotations

import json

from core.state.store import Store

SETTING = "cluster_check/{}"


def last_check(store: Store, cluster: str) -> dict | None:
    """The kept result, or None (never checked, or a value this version cannot read)."""
    saved = store.get_setting(SETTING.format(cluster))
    try:
        result = json.loads(saved) if saved else None
    except ValueError:
        return None
    return result if isinstance(result, dict) and isinstance(result.get("nodes"), list) else None


def keep(store: Store, cluster: str, result: dict) -> None:
    store.set_setting(SETTING.format(cluster), json.dumps(result))
