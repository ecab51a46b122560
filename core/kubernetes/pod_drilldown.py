"""A workspace's pods, one level down (issue 43): node, datacenter, phase, restarts and last events
per pod, and a `kubectl describe`-like detail. Pure functions over the API's JSON (the pod list and
the namespace's events, core.kubernetes.pod_phases.events_by_pod); every value in them is the
cluster's words, printed through core.domain.terminal_text.printable.

What a pod shows follows kubectl's describe (kubernetes/kubectl pkg/describe/describe.go,
describePod / describeContainerState: State with its Reason and Exit Code, Last State,
Restart Count, Conditions, Events as type/reason/message), trimmed to what a worker needs.
"""

from __future__ import annotations

from typing import Any

from core.domain.datacenters import DATACENTER_ENV, ZONE_LABEL
from core.domain.run_events import one_line
from core.kubernetes.pod_logs import CONTAINER, container_status
from core.kubernetes.pod_phases import being_deleted, worker_detail

EVENTS_SHOWN = 5
TEXT_LIMIT = 300


def _text(value: Any) -> str:
    return one_line(str(value))[:TEXT_LIMIT]


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    return next((c for c in spec.get("containers") or [] if c.get("name") == CONTAINER), {})


def datacenter(pod: dict[str, Any]) -> str:
    """The datacenter geotrain placed the pod in (its GEOTRAIN_DATACENTER, from
    core.kubernetes.datacenter_tasks), else its zone label, else ''."""
    for var in _container(pod).get("env") or []:
        if var.get("name") == DATACENTER_ENV and isinstance(var.get("value"), str):
            return _text(var["value"])
    return _text(((pod.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL, ""))


def event_line(event: dict[str, Any]) -> str:
    """'2026-11-28T10:00:00Z Warning BackOff: Back-off restarting failed container (x3)'."""
    when = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "-"
    count = event.get("count")
    times = f" (x{count})" if isinstance(count, int) and count > 1 else ""
    return _text(f"{when} {event.get('type', '')} {event.get('reason', '')}: {event.get('message', '')}{times}")


def restarts(pod: dict[str, Any]) -> int:
    count = container_status(pod).get("restartCount")
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0


def _state(state: dict[str, Any]) -> str:
    """A container state as describe words it: Running since, Waiting: reason, Terminated: reason, exit code."""
    if "running" in state:
        return f"Running since {(state['running'] or {}).get('startedAt', '?')}"
    if "waiting" in state:
        waiting = state["waiting"] or {}
        return " ".join(filter(None, ["Waiting:", waiting.get("reason"), waiting.get("message")]))
    if "terminated" in state:
        done = state["terminated"] or {}
        return (f"Terminated: {done.get('reason') or 'exited'}, exit code {done.get('exitCode')}"
                + (f", finished {done['finishedAt']}" if done.get("finishedAt") else ""))
    return "-"


def _env_names(pod: dict[str, Any]) -> str:
    """The trainer's variables: names only for those read from a Secret (their values are tokens)."""
    said = []
    for var in _container(pod).get("env") or []:
        name = var.get("name", "?")
        said.append(f"{name} (from a Secret)" if "valueFrom" in var else f"{name}={var.get('value', '')}")
    return ", ".join(said)


def describe(pod: dict[str, Any], events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    cstatus = container_status(pod)
    rows = [("node", spec.get("nodeName") or "(not scheduled)"), ("pod IP", status.get("podIP") or "-"),
            ("phase", (status.get("phase") or "Pending") + (" (being deleted)" if being_deleted(pod) else "")),
            ("started", status.get("startTime") or "-"), ("image", _container(pod).get("image") or "-"),
            ("state", _state(cstatus.get("state") or {})),
            ("last state", _state(cstatus.get("lastState") or {})),
            ("restarts", str(restarts(pod)))]
    rows += [("condition", f"{c.get('type')}={c.get('status')}" + (f" ({c['message']})" if c.get("message") else ""))
             for c in status.get("conditions") or []]
    worker = worker_detail(pod)
    if worker:
        rows.append(("detail", worker))
    rows.append(("env", _env_names(pod) or "-"))
    rows.append(("labels", ", ".join(f"{k}={v}" for k, v in (meta.get("labels") or {}).items()) or "-"))
    return [(key, _text(value)) for key, value in rows]


def pod_rows(pods: list[dict[str, Any]], events: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per pod, in the order given (rank = position: `workspaces shell --rank N` opens the
    Nth), as keyword arguments of core.backends.base.WorkerProcess."""
    rows = []
    for rank, pod in enumerate(pods):
        name = (pod.get("metadata") or {}).get("name", "?")
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if being_deleted(pod):
            phase += " (being deleted)"
        rows.append({"name": _text(name), "rank": rank, "state": _text(phase),
                     "node": _text((pod.get("spec") or {}).get("nodeName") or "-"), "datacenter": datacenter(pod),
                     "restarts": restarts(pod),
                     "events": [event_line(e) for e in events.get(name, [])][-EVENTS_SHOWN:],
                     "detail": describe(pod, events.get(name, []))})
    return rows
