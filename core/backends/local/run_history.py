"""What happened to a local workspace while no app was watching: the supervisor appends
one JSON object per line to <run dir>/history.jsonl (it needs no database), and
core.workspaces merges those lines into the workspace's history.

It also reads the workers' output as it passes: progress lines (`step N/M`) tell how far
each worker got, and `geotrain-event {...}` lines are the recipes' own reports (rejoined,
resumed). From them it writes, for each failure, a `recovery` record (when, why) and,
once the worker trains again, a `recovered` record (downtime, steps lost).
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

STEP_LINE = re.compile(r"\bstep (\d+)/(\d+)\b")
EVENT_PREFIX = "geotrain-event "
HISTORY_FILE = "history.jsonl"


def read_history(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / HISTORY_FILE)


def read_jsonl(path: Path) -> list[dict]:
    """The complete lines of a JSONL file another process may be appending to."""
    rows = []
    try:
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line being written right now
    except FileNotFoundError:
        pass
    return rows


class RunHistory:
    """Appends history records and follows worker progress (thread-safe: one pump per worker)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / HISTORY_FILE
        self.lock = threading.Lock()
        self.last_step: dict[str, int] = {}
        self.last_outer_step: dict[str, int] = {}
        self.pending: dict[str, dict] = {}  # worker -> open recovery, waiting for training again

    def add(self, kind: str, **detail) -> dict:
        record = {"at": time.time(), "kind": kind, **detail}
        with self.lock, open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        return record

    def worker_line(self, worker: str, text: str) -> None:
        """Called for every line a worker prints."""
        if text.startswith(EVENT_PREFIX):
            try:
                event = json.loads(text[len(EVENT_PREFIX):])
            except json.JSONDecodeError:
                return
            if event.get("kind") in ("rejoined", "joined") and worker in self.pending:
                self.pending[worker]["rejoined"] = event
            if event.get("kind") == "resumed" and worker in self.pending:
                self.pending[worker]["resumed_step"] = event.get("step")
            return
        match = STEP_LINE.search(text)
        if not match:
            return
        step = int(match.group(1))
        outer = re.search(r"\bouter (\d+)\b", text)
        if outer:
            self.last_outer_step[worker] = int(outer.group(1))
        self.last_step[worker] = step
        opened = self.pending.pop(worker, None)
        if opened is not None:
            self._recovered(worker, step, opened)

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

    def _recovered(self, worker: str, step: int, opened: dict) -> None:
        rejoined = opened.get("rejoined") or {}
        resumed = opened.get("resumed_step")
        before = opened["last_step"] or 0
        if rejoined:  # the step the group agreed on (a live peer's, or the newest checkpoint)
            restart_point = rejoined.get("step", step)
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
