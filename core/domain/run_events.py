"""The recipes' own report lines (`geotrain-event {json}`), read in one place.

Workers print an event line when something happens that a person or the app should know
(data being prepared, waiting for peers, joined, recovered, an outer step averaged over
fewer workers). Here they become one readable line for the log view and `workspaces
logs`, and each worker's phase (PREPARING_DATA, RENDEZVOUS, RUNNING) for the workspace's
status. A line that only looks like an event (bad JSON, no kind, a number that is not
finite or out of range) is left as it is. Any worker output can imitate an event line, so events
drive display state only, and nothing here may raise on one: a line that breaks the wording is
shown raw and leaves the phase as it was.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from core.domain.records import Status
from core.domain.terminal_text import printable

EVENT_PREFIX = "geotrain-event "
STEP_LINE = re.compile(r"\bstep ([0-9]{1,15})/([0-9]{1,15})\b")  # ASCII, bounded: int() of 5000 digits raises
MARK = "▸ "  # what an event's readable line starts with, in the log view and `workspaces logs`
MAX_EVENT_CHARS = 4000  # an event is small; a longer line is not one of ours
_PREFIX = re.compile(r"\[default\d+\]:|\[rank \d+\]")  # torchrun's --tee prefix, or ours
MAX_NUMBER = 10 ** 15  # no count, step, rank or time in an event comes near this
_COUNTS = ("done", "total", "seconds", "step", "outer_step", "rank", "world")  # never negative


def one_line(text: str) -> str:
    """Text from a worker, a pod or an API, safe to print (core.domain.terminal_text)."""
    return printable(text)


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number an event carries")


def _sane_numbers(event: dict) -> bool:
    """Every top-level number finite and bounded, the counts non-negative."""
    for key, value in event.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not -MAX_NUMBER <= value <= MAX_NUMBER:  # also False for NaN
            return False
        if key in _COUNTS and value < 0:
            return False
    return True


def parse_event(line: str) -> dict | None:
    """The event in a worker's line (a `[rank N] ` prefix allowed), or None."""
    start = line.find(EVENT_PREFIX)
    if start < 0 or len(line) - start > MAX_EVENT_CHARS:
        return None
    prefix = line[:start].strip()
    if prefix and not _PREFIX.fullmatch(prefix):
        return None
    try:
        event = json.loads(line[start + len(EVENT_PREFIX):], parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
        return None
    return event if _sane_numbers(event) else None


# utilization ----------------------------------------------------------------------
# Each rank's `utilization` event, every logging interval: field -> (lowest, highest). A
# process's CPU share counts all its threads (1.0 = one core busy the whole interval).
UTILIZATION_FIELDS = {"rank": (0, 1 << 20), "step": (0, MAX_NUMBER), "wall_s": (0, 1e7), "cpu": (0, 4096),
                      "wait_s": (0, 1e7), "gpu": (0, 100), "gpu_memory_bytes": (0, 1 << 50)}
UTILIZATION_NEEDS = ("rank", "wall_s", "cpu", "wait_s")
UTILIZATION_KEPT = 60  # figures per worker kept for the app's sparklines (one per logging interval)
_WHOLE = ("rank", "step", "gpu_memory_bytes")


def utilization(event: dict) -> dict | None:
    """A `utilization` event's figures, or None when any is missing, of the wrong type or out of
    range (any output can imitate an event); the network wait also as a share of the interval."""
    if event.get("kind") != "utilization":
        return None
    figures = {}
    for key, (low, high) in UTILIZATION_FIELDS.items():
        value = event.get(key)
        if value is None and key not in UTILIZATION_NEEDS:
            continue
        whole = isinstance(value, int) or (isinstance(value, float) and key not in _WHOLE)
        if isinstance(value, bool) or not whole or not low <= value <= high:
            return None
        figures[key] = value
    if figures["wall_s"] <= 0:
        return None
    figures["wait_ratio"] = min(1.0, figures["wait_s"] / figures["wall_s"])
    return figures


def _n(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _ranks(values) -> str:
    return ", ".join(str(v) for v in values) if isinstance(values, list) else str(values)


def data_detail(event: dict) -> str:
    """Where a worker's data preparation stands, e.g. `c4: 12,000 of 40,000 tokens (30%)`."""
    source = event.get("source") or "data"
    stage = event.get("stage")
    if stage == "done":
        amount = f": {_n(event['done'])} {event.get('unit', 'items')}" if "done" in event else ""
        how = " from the cache" if event.get("cached") else ""
        took = f" in {event['seconds']}s" if isinstance(event.get("seconds"), (int, float)) else ""
        return f"{source}{amount}{how}{took}"
    done, total, unit = event.get("done"), event.get("total"), event.get("unit", "items")
    if isinstance(done, (int, float)) and isinstance(total, (int, float)) and total > 0:
        return f"{source}: {_n(done)} of {_n(total)} {unit} ({min(100, int(100 * done / total))}%)"
    if isinstance(done, (int, float)):
        return f"{source}: {_n(done)} {unit}"
    what = event.get("what")
    return f"{source}: {what}" if what else f"{source}: starting"


def describe(event: dict) -> str:
    """One short line for a person."""
    kind = event.get("kind")
    rank = event.get("rank")
    who = f"rank {rank}" if rank is not None else "a worker"
    if kind == "data":
        stage = event.get("stage")
        head = "data ready" if stage == "done" else "preparing data"
        return f"{head}: {data_detail(event)}"
    if kind == "rendezvous":
        world = event.get("world")
        of = f" of {world}" if world is not None else ""
        if event.get("stage") == "joined":
            took = f" in {event['seconds']}s" if isinstance(event.get("seconds"), (int, float)) else ""
            return f"rendezvous done: {who}{of}{took}"
        text = "waiting for peers" + (f": {who}{of}" if rank is not None else "")
        missing = event.get("missing")
        if missing:
            ints = isinstance(missing, list) and all(isinstance(m, int) for m in missing)
            text += f", missing {'rank ' if ints else ''}{_ranks(missing)}"
        return text + (f" (at {event['endpoint']})" if event.get("endpoint") else "")
    if kind in ("joined", "rejoined"):
        text = f"{kind}: {who}"
        if event.get("step") is not None:
            text += f" at step {event['step']}"
            if event.get("outer_step") is not None:
                text += f" (outer step {event['outer_step']})"
        if event.get("source") is not None and event.get("source") != rank:
            text += f", state from rank {event['source']}"
        if kind == "rejoined" and event.get("reason"):
            text += f" ({event['reason']})"
        return text
    if kind == "resumed":
        return f"recovered from step {event.get('step')}: {who} loaded its newest checkpoint"
    if kind == "outer_step":
        members = event.get("members") or []
        count = len(members) if isinstance(members, list) else members
        return (f"outer step {event.get('step')} averaged over {count} of {event.get('world')}"
                f" (ranks {_ranks(members)})")
    if kind == "utilization" and utilization(event) is not None:
        figures = utilization(event)
        gpu = f", GPU {figures['gpu']:.0f}%" if "gpu" in figures else ""
        return f"utilization: {who} CPU {100 * figures['cpu']:.0f}%, network wait {100 * figures['wait_ratio']:.0f}%{gpu}"
    rest = ", ".join(f"{k} {v}" for k, v in event.items() if k not in ("kind", "at"))
    return f"{kind}: {rest}" if rest else str(kind)


def readable(line: str) -> str | None:
    """The readable form of an event line, on one line (escape sequences a value decoded to are
    removed, newlines become spaces); None when it is not a well-formed event."""
    event = parse_event(line)
    if event is None:
        return None
    try:
        return printable(describe(event))
    except Exception:  # noqa: BLE001 - a worker's line must never stop the reader; show it raw
        return None


# phases ------------------------------------------------------------------------

@dataclass
class WorkerPhase:
    """What one worker is doing, followed from its output lines."""

    status: str = Status.PENDING.value
    detail: str = ""
    step: int | None = None
    data_ready: bool = False  # reported its data prepared (elastic workers do so before they join)

    def feed(self, line: str) -> bool:
        """Take one output line; True when the phase or its detail changed."""
        before = (self.status, self.detail)
        event = parse_event(line)
        if event is not None:
            try:
                self._event(event)
                self.detail = printable(self.detail)
            except Exception:  # noqa: BLE001 - a worker's line must never stop the reader
                self.status, self.detail = before
                return False
        elif self.status != Status.RUNNING.value or self.step is None:
            match = STEP_LINE.search(line)
            if match:
                self.step = int(match.group(1))
                self.status, self.detail = Status.RUNNING.value, ""
        return (self.status, self.detail) != before

    def _event(self, event: dict) -> None:
        kind = event["kind"]
        if self.status == Status.RUNNING.value and kind in ("data", "rendezvous"):
            return  # a late report from a worker that already trains
        if kind == "data":
            self.status = Status.PREPARING_DATA.value
            self.data_ready = event.get("stage") == "done"
            self.detail = ("data ready: " if event.get("stage") == "done" else "preparing ") + data_detail(event)
        elif kind == "rendezvous":
            self.status = Status.RENDEZVOUS.value
            missing = event.get("missing")
            waiting = f"waiting for {_ranks(missing)}" if missing else "waiting for peers"
            self.detail = "joined the group" if event.get("stage") == "joined" else waiting
        elif kind in ("joined", "rejoined"):
            self.status, self.detail = Status.RENDEZVOUS.value, "joined, starting to train"


FAILED_NAMED = 3  # failed workers named in the workspace's reason (each one's row says why)


def combine(phases: dict[str, WorkerPhase | tuple[str, str]], expected: list[str]) -> tuple[str, str]:
    """The workspace's status and reason from its workers' phases (missing ones are PENDING).
    Before training, the slowest phase shows (PULLING, INSTALLING_DEPS, then PREPARING_DATA), except that a late
    worker's data preparation does not take back a workspace where a worker has joined with its
    data ready; once a worker trains, the workspace is RUNNING and the others are named. A
    failed worker is named as failed, with why, and never counted among those still to come
    (the workspace's own FAILED comes from the job and the recovery check, not from here)."""
    got = {name: (p.status, p.detail) if isinstance(p, WorkerPhase) else p for name, p in phases.items()}
    ready = {name for name, p in phases.items() if isinstance(p, WorkerPhase) and p.data_ready}
    for name in expected:
        got.setdefault(name, (Status.PENDING.value, "not started"))
    by_status: dict[str, list[str]] = {}
    for name, (status, _) in sorted(got.items(), key=lambda item: natural_key(item[0])):
        by_status.setdefault(status, []).append(name)
    if not got:
        return Status.PENDING.value, ""

    def listed(status: Status) -> str:
        return "; ".join(f"{name}: {got[name][1]}" if got[name][1] else name for name in by_status[status.value])

    def named(names: list[str]) -> str:  # a laggard pulling or preparing its data says how far it is
        return ", ".join(f"{name} ({got[name][1]})" if got[name][0] in (Status.PULLING.value, Status.INSTALLING_DEPS.value,
                                                                          Status.PREPARING_DATA.value, Status.FAILED.value)
                         and got[name][1] else name for name in sorted(names, key=natural_key))

    failed = by_status.get(Status.FAILED.value, [])

    def said(status: str, reason: str) -> tuple[str, str]:
        if not failed:
            return status, reason
        more = f" and {len(failed) - FAILED_NAMED} more" if len(failed) > FAILED_NAMED else ""
        return status, "; ".join(part for part in (reason, f"failed: {named(failed[:FAILED_NAMED])}{more}") if part)

    running = by_status.get(Status.RUNNING.value, []) + by_status.get(Status.COMPLETED.value, [])
    present = by_status.get(Status.RENDEZVOUS.value, [])
    if Status.PULLING.value in by_status and not running:
        return said(Status.PULLING.value, listed(Status.PULLING))
    if Status.INSTALLING_DEPS.value in by_status and not running:
        return said(Status.INSTALLING_DEPS.value, listed(Status.INSTALLING_DEPS))
    # A worker that joined with its data ready (elastic: data first, then the group) keeps the
    # workspace in RENDEZVOUS while a late one prepares its data; it is named among those awaited.
    # Under torchrun workers join first and prepare data after, so there PREPARING_DATA shows.
    if Status.PREPARING_DATA.value in by_status and not running and not ready & set(present):
        return said(Status.PREPARING_DATA.value, listed(Status.PREPARING_DATA))
    behind = [name for name in got if name not in running and name not in failed]
    if running and not behind and not failed:
        return Status.RUNNING.value, ""
    if running:
        waiting = f"; not yet: {named(behind)}" if behind else ""
        return said(Status.RUNNING.value, f"{len(running)} of {len(got)} training{waiting}")
    if present:
        missing = [name for name in got if name not in present and name not in failed]
        if missing:
            return said(Status.RENDEZVOUS.value, f"{len(present)} of {len(got)} present, waiting for {named(missing)}")
        return said(Status.RENDEZVOUS.value, f"all {len(present)} present, forming the group" if not failed
                    else f"{len(present)} of {len(got)} present")
    return said(Status.PENDING.value, "")


def natural_key(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def describe_record(event: dict) -> str:
    """A history record's details that matter (a recovery's, a state's), in one line: ': …' or ''."""
    if event["kind"] == "recovery":
        return (f": {event['cause']} — recovering {', '.join(event['workers'])}"
                f" ({event['scope']}, {event['attempt']} of {event['budget']})")
    if event["kind"] == "recovered" and event.get("step") is None:  # a watcher in the cluster sees pods, not steps
        return f": {event['worker']} running again after {event['downtime_s']:.1f}s"
    if event["kind"] == "recovered":
        outer = f", outer step {event['outer_step']}" if event.get("outer_step") is not None else ""
        return (f": {event['worker']} training again at step {event['step']}{outer} after"
                f" {event['downtime_s']:.1f}s, {event['steps_lost']} steps lost")
    if event["kind"] == "gave_up":
        return f": {event['cause']} — retry budget of {event['budget']} spent"
    if event["kind"] == "kept":
        return f": {event['cause']} — kept for a look (recovery.keep_failed_pods), not replaced"
    if event["kind"] == "quorum":  # the datacenters in a Kubernetes workspace's elastic quorum changed
        left = f"; {', '.join(event['left'])} left" if event.get("left") else ""
        step = f" at outer step {event['outer_step']}" if event.get("outer_step") is not None else ""
        return f": {', '.join(event['datacenters'])} in the quorum{step} ({event['workers']} workers){left}"
    if event["kind"] == "state":
        return f": {event.get('status')}" + (f" ({event['reason']})" if event.get("reason") else "")
    return ""
