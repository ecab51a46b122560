"""What the workspace's watcher (recipes/watcher.py) wrote into its history ConfigMap, read
strictly: the ConfigMap is writable from inside the cluster, so each entry is checked (kind,
finite numbers, bounded printable text) and anything else is left out, never shown raw."""

from __future__ import annotations

import json
import math
from typing import Any

from core.domain.terminal_text import printable

HISTORY_KEY, STATE_KEY = "history.json", "watcher.json"
MAX_BYTES = 1 << 20
MAX_ENTRIES = 500
MAX_TEXT = 200
# kind -> its fields and their types (core.cli.workspaces.describe_event shows them)
FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "recovery": {"cause": (str,), "workers": (list,), "scope": (str,), "attempt": (int,), "budget": (int,)},
    "recovered": {"worker": (str,), "downtime_s": (int, float), "step": (int, type(None)),
                  "steps_lost": (int, type(None))},
    "gave_up": {"cause": (str,), "budget": (int,)},
    "kept": {"cause": (str,)},  # recovery.keep_failed_pods: the failed pod left for a look
    # the datacenters in the elastic quorum changed (one lost, one back): the watcher's store saw it
    "quorum": {"datacenters": (list,), "left": (list,), "outer_step": (int, type(None)), "workers": (int,)},
}
MAX_DATACENTERS = 64
STATE_FIELDS = {"updated_at": (int, float), "used": (int,), "budget": (int,), "job_phase": (str,),
                "pods": (int,), "running": (int,)}


def _number_ok(value: Any) -> bool:
    return not isinstance(value, bool) and (not isinstance(value, float) or math.isfinite(value))


def _value(value: Any, types: tuple[type, ...]) -> Any:
    """The value if it has one of `types` (bounded, printable); raises ValueError otherwise."""
    if not isinstance(value, types) or isinstance(value, bool) or not _number_ok(value):
        raise ValueError
    if isinstance(value, str):
        return printable(value)[:MAX_TEXT]
    if isinstance(value, list):
        if len(value) > 64 or not all(isinstance(v, str) for v in value):
            raise ValueError
        return [printable(v)[:MAX_TEXT] for v in value]
    return value


def _entry(raw: Any) -> dict | None:
    if not isinstance(raw, dict) or raw.get("kind") not in FIELDS:
        return None
    at = raw.get("at")
    try:
        if not isinstance(at, (int, float)) or not _number_ok(at):
            raise ValueError
        fields = {key: _value(raw.get(key), types) for key, types in FIELDS[raw["kind"]].items()}
    except ValueError:
        return None
    return {"at": float(at), "kind": raw["kind"], "source": "watcher", **fields}


def _json(data: dict, key: str) -> Any:
    text = data.get(key)
    if not isinstance(text, str) or len(text.encode()) > MAX_BYTES:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def read_history(config_map: dict | None) -> list[dict]:
    """The watcher's recoveries, oldest first; entries that do not check are left out."""
    entries = _json((config_map or {}).get("data") or {}, HISTORY_KEY)
    if not isinstance(entries, list):
        return []
    return [e for e in map(_entry, entries[-MAX_ENTRIES:]) if e is not None]


def read_state(config_map: dict | None) -> dict | None:
    """The watcher's last word on the job: when it last wrote, the budget used, the pods running."""
    state = _json((config_map or {}).get("data") or {}, STATE_KEY)
    if not isinstance(state, dict) or "updated_at" not in state:
        return None
    out = {}
    for key, types in STATE_FIELDS.items():
        try:
            out[key] = _value(state.get(key), types)
        except ValueError:
            continue
    quorum = _quorum(state.get("quorum"))
    if quorum is not None:
        out["quorum"] = quorum
    return out if "updated_at" in out else None


def _quorum(raw: Any) -> dict | None:
    """The elastic quorum the watcher's store holds: outer step, workers, datacenter -> its workers."""
    if not isinstance(raw, dict) or not isinstance(raw.get("datacenters"), dict):
        return None
    try:
        step = _value(raw.get("outer_step"), (int, type(None)))
        workers = _value(raw.get("workers"), (int,))
        if len(raw["datacenters"]) > MAX_DATACENTERS:
            raise ValueError
        by_dc = {_value(dc, (str,))[:64]: _value(n, (int,)) for dc, n in raw["datacenters"].items()}
    except ValueError:
        return None
    return {"outer_step": step, "workers": workers, "datacenters": by_dc}


def describe_quorum(quorum: dict) -> str:
    """`quorum at outer step 12: dc-a (2 workers), dc-b (2 workers)`; no quorum yet said so."""
    if not quorum["datacenters"]:
        return "no elastic quorum formed yet"
    step = f" at outer step {quorum['outer_step']}" if quorum["outer_step"] is not None else ""
    present = ", ".join(f"{dc} ({n} worker{'s' if n != 1 else ''})" for dc, n in quorum["datacenters"].items())
    return f"quorum{step}: {present}"


def describe(state: dict, now: float) -> str:
    """The watcher's line for the CLI and the app: when it last wrote, the budget used, the pods running."""
    ago = max(0.0, now - state["updated_at"])
    used = f", {state['used']} of {state['budget']} recoveries used" if "used" in state and "budget" in state else ""
    pods = f", {state['running']} of {state['pods']} pods running" if "running" in state and "pods" in state else ""
    quorum = f"; {describe_quorum(state['quorum'])}" if state.get("quorum") else ""
    return f"watcher (in the cluster): last seen {ago:.0f}s ago{used}{pods}{quorum}"
