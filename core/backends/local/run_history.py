"""What happened to a local workspace while no app was watching: the supervisor appends
one JSON object per line to <run dir>/history.jsonl (it needs no database), and
core.workspaces merges those lines into the workspace's history.

It also reads the workers' output as it passes: progress lines (`step N/M`) tell how far
each worker got, and `geotrain-event {...}` lines are the recipes' own reports (rejoined,
resumed). From them it writes, for each failure, a `recovery` record (when, why) and,
once the worker trains again, a `recovered` record (downtime, steps lost).

The same lines give each worker's phase (core.domain.run_events): the workspace's
current state is kept in <run dir>/phase.json for the backend's status, and each change
of it is a `state` record in the history.
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from pathlib import Path

from core.domain.records import Status
from core.domain.run_events import EVENT_PREFIX, STEP_LINE, UTILIZATION_KEPT, WorkerPhase, combine, parse_event, \
    utilization
from core.state.atomic_files import write_atomically

HISTORY_FILE = "history.jsonl"
PHASE_FILE = "phase.json"
UTILIZATION_FILE = "utilization.json"


def read_phase(run_dir: Path) -> dict | None:
    """The state the supervisor last derived ({"status", "reason", "workers": {name: [status,
    detail]}}), or None before any worker spoke (or from a supervisor older than this file)."""
    try:
        phase = json.loads((run_dir / PHASE_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return phase if isinstance(phase, dict) and phase.get("status") in Status.__members__ else None


def _saved_utilization(run_dir: Path) -> dict:
    try:
        saved = json.loads((run_dir / UTILIZATION_FILE).read_text())
    except (FileNotFoundError, ValueError, RecursionError):
        return {}
    return saved if isinstance(saved, dict) else {}


def read_utilization(run_dir: Path) -> dict[str, dict]:
    """Each worker's last utilization figures ({worker: figures}), checked again on reading (the file
    is in the run's directory, which anything running as the user can write)."""
    saved = _saved_utilization(run_dir)
    figures = {name: utilization({**event, "kind": "utilization"}) for name, event in saved.items()
               if isinstance(name, str) and name.startswith("worker-") and isinstance(event, dict)}
    return {name: f for name, f in figures.items() if f is not None}


def read_utilization_history(run_dir: Path) -> dict[str, list[dict]]:
    """Each worker's recent figures, oldest first (at most UTILIZATION_KEPT), each checked as
    read_utilization checks the last; a sample that fails the check is left out."""
    saved = _saved_utilization(run_dir)
    kept = {}
    for name, event in saved.items():
        recent = event.get("recent") if isinstance(event, dict) else None
        if not (isinstance(name, str) and name.startswith("worker-") and isinstance(recent, list)):
            continue
        samples = [utilization({**s, "kind": "utilization"}) for s in recent[-UTILIZATION_KEPT:]
                   if isinstance(s, dict)]
        kept[name] = [s for s in samples if s is not None]
    return kept


def read_history(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / HISTORY_FILE)


def read_jsonl(path: Path) -> list[dict]:
    """The complete lines of a JSONL file another process may be appending to; a line that
    is not a JSON object (one being written right now, or not ours) is left out."""
    rows = []
    try:
        for line in path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict):
                rows.append(row)
    except FileNotFoundError:
        pass
    return rows


class RunHistory:
    """Appends history records and follows worker progress (thread-safe: one pump per worker)."""

    def __init__(self, run_dir: Path, workers: int = 1) -> None:
        self.path = run_dir / HISTORY_FILE
        self.phase_path = run_dir / PHASE_FILE
        self.expected = [f"worker-{rank}" for rank in range(workers)]
        self.phases: dict[str, WorkerPhase] = {}
        self.state: tuple[str, str] | None = None
        self.phase_lock = threading.Lock()
        self.lock = threading.Lock()
        self.last_step: dict[str, int] = {}
        self.last_outer_step: dict[str, int] = {}
        self.pending: dict[str, dict] = {}  # worker -> open recovery, waiting for training again
        self.utilization_path = run_dir / UTILIZATION_FILE
        self.utilization: dict[str, dict] = {}  # worker -> its last utilization figures
        self.recent: dict[str, collections.deque] = {}  # worker -> its last UTILIZATION_KEPT figures
        self.listeners: list = []  # called with each record added (the supervisor's notifier)

    def add(self, kind: str, **detail) -> dict:
        record = {"at": time.time(), "kind": kind, **detail}
        with self.lock, open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        for listener in self.listeners:
            listener(record)
        return record

    def starting(self) -> None:
        """The supervisor is (re)starting the workers: PENDING until they speak (this also tells
        the backend that states come from here, not from the mere presence of output)."""
        with self.phase_lock:
            self.phases.clear()
            write_atomically(self.phase_path, json.dumps({"status": Status.PENDING.value,
                                                          "reason": "starting the workers",
                                                          "workers": {}, "at": time.time()}))
            self.state = (Status.PENDING.value, "starting the workers")

    def worker_line(self, worker: str, text: str) -> None:
        """Called for every line a worker prints. Any output can imitate an event: one that is
        not a well-formed event (a JSON object of the expected types) is only log text."""
        self._follow_phase(worker, text)
        if text.startswith(EVENT_PREFIX):
            event = parse_event(text)
            if event is not None and event["kind"] == "utilization":
                self._utilization(worker, event)
                return
            opened = self.pending.get(worker)
            if event is None or opened is None:
                return
            if event["kind"] in ("rejoined", "joined"):
                opened["rejoined"] = {"step": _count(event.get("step")), "outer_step": _count(event.get("outer_step"))}
            if event["kind"] == "resumed":
                opened["resumed_step"] = _count(event.get("step"))
            return
        match = STEP_LINE.search(text)
        if not match:
            return
        step = int(match.group(1))
        outer = re.search(r"\bouter ([0-9]{1,15})\b", text)
        if outer:
            self.last_outer_step[worker] = int(outer.group(1))
        self.last_step[worker] = step
        opened = self.pending.pop(worker, None)
        if opened is not None:
            self._recovered(worker, step, opened)

    def _utilization(self, worker: str, event: dict) -> None:
        figures = utilization(event)
        if figures is None:
            return
        with self.phase_lock:
            recent = self.recent.setdefault(worker, collections.deque(maxlen=UTILIZATION_KEPT))
            recent.append(figures)
            self.utilization[worker] = {**figures, "at": time.time(), "recent": list(recent)}
            write_atomically(self.utilization_path, json.dumps(self.utilization))

    def _follow_phase(self, worker: str, text: str, restart: bool = False) -> None:
        with self.phase_lock:
            phase = self.phases.setdefault(worker, WorkerPhase())
            if restart:
                self.phases[worker] = WorkerPhase(detail="restarting")
            elif not phase.feed(text):
                return
            status, reason = combine(self.phases, self.expected)
            workers = {name: [p.status, p.detail] for name, p in self.phases.items()}
            write_atomically(self.phase_path, json.dumps({"status": status, "reason": reason,
                                                          "workers": workers, "at": time.time()}))
            if status != (self.state or ("", ""))[0]:
                self.add("state", status=status, reason=reason)
            self.state = (status, reason)

    def failed(self, workers: list[str], cause: str, attempt: int, budget: int, scope: str,
               noticed: float | None = None) -> None:
        """A failure noticed (at `noticed`, default now): record it and wait for these workers
        to train again; downtime counts from when it was noticed (one poll after the death)."""
        steps = {w: self.last_step.get(w) for w in workers}
        self.add("recovery", scope=scope, workers=workers, cause=cause, attempt=attempt,
                 budget=budget, last_steps=steps)
        now = noticed or time.time()
        for worker in workers:
            self.pending[worker] = {"failed_at": now, "last_step": steps[worker], "scope": scope}
            self._follow_phase(worker, "", restart=True)

    def _recovered(self, worker: str, step: int, opened: dict) -> None:
        rejoined = opened.get("rejoined") or {}
        resumed = opened.get("resumed_step")
        before = opened["last_step"] or 0
        if rejoined:  # the step the group agreed on (a live peer's, or the newest checkpoint)
            restart_point = step if rejoined["step"] is None else rejoined["step"]
        else:
            restart_point = resumed if resumed is not None else 0
        if opened["scope"] == "worker" and rejoined:
            lost = 0  # the others went on; only this worker's unsynced inner steps were dropped
        else:
            lost = max(0, before - restart_point)
        self.add("recovered", worker=worker, scope=opened["scope"], step=step,
                 restarted_at_step=restart_point, steps_lost=lost,
                 outer_step=rejoined.get("outer_step"),
                 downtime_s=round(time.time() - opened["failed_at"], 3))


def _count(value) -> int | None:
    """A step from an event, or None when it is not a whole number (parse_event bounds it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
