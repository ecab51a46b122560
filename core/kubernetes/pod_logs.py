"""Logs of every pod of a job, merged and labelled, followed across container restarts.

`read_namespaced_pod_log(follow=True, _preload_content=False)` yields arbitrary byte
chunks, so lines are split here and a partial tail waits for its end. A follow stream
has a bounded read timeout; it is reopened with timestamps so no line is shown twice.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.domain.line_splitter import CUT_MARK, MAX_LINE_CHARS, LineSplitter

__all__ = ["CUT_MARK", "MAX_LINE_CHARS", "LineSplitter", "JobLogs"]

CONTAINER = "trainer"
# recipes.train prints "[rank 0] step 20/200 loss 3.1416 lr 3.00e-03 outer 1 sent 0.125MB 12.5ms/step"
_PROGRESS_RE = re.compile(r"\[rank 0\] step (\d+)/\d+ loss (\S+) lr (\S+) outer (\d+) "
                          r"sent ([\d.]+)MB ([\d.]+)ms/step")
_TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$")


def split_timestamp(line: str) -> tuple[tuple[str, str] | None, str]:
    """("2026-…T…Z text") -> (sortable key, text); RFC3339Nano trims zeros, so pad them."""
    stamp, _, text = line.partition(" ")
    match = _TS_RE.fullmatch(stamp)
    if not match:
        return None, line
    return (match.group(1), (match.group(2) or "").ljust(9, "0")), text


def progress_row(line: str) -> dict[str, Any] | None:
    """A metrics row from one of rank 0's progress lines; None for any other line."""
    match = _PROGRESS_RE.search(line)
    if not match:
        return None
    step, loss, lr, outer, sent, ms = match.groups()
    try:
        return {"step": int(step), "loss": float(loss), "lr": float(lr), "outer_step": int(outer),
                "bytes_sent": int(float(sent) * 1e6), "step_time": float(ms) / 1000}
    except ValueError:
        return None


def read_json(response: Any) -> dict[str, Any]:
    return json.loads(response.data or b"{}")


def container_status(pod: dict[str, Any]) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return status
    return {}


@dataclass
class _Seen:
    """What has been shown of one pod name: incarnations (uid, restart count) streamed."""

    streamed: set[tuple[str, int]] = field(default_factory=set)
    uids: set[str] = field(default_factory=set)


class JobLogs:
    """Reads the logs of the pods that `list_pods()` returns, labelled by `label(pod)`."""

    def __init__(self, core: client.CoreV1Api, namespace: str,
                 list_pods: Callable[[], list[dict]], label: Callable[[str], str],
                 finished: Callable[[], bool], poll_s: float = 1.0,
                 read_timeout_s: float = 300.0, request_timeout=(5, 30)) -> None:
        self.core, self.namespace = core, namespace
        self.list_pods, self.label, self.finished = list_pods, label, finished
        self.poll_s, self.read_timeout_s, self.request_timeout = poll_s, read_timeout_s, request_timeout

    # one-shot ------------------------------------------------------------------
    def snapshot(self) -> Iterator[tuple[str, str]]:
        """Logs so far: a restarted container's previous run first, then the current one."""
        for pod in sorted(self.list_pods(), key=lambda p: p["metadata"]["name"]):
            name, status = pod["metadata"]["name"], container_status(pod)
            if status.get("restartCount", 0) > 0:
                yield from self._read_all(name, previous=True)
            if status.get("state", {}).get("running") or status.get("state", {}).get("terminated"):
                yield from self._read_all(name, previous=False)

    def _read_all(self, name: str, previous: bool) -> Iterator[tuple[str, str]]:
        label = self.label(name) + (" (previous)" if previous else "")
        try:
            response = self.core.read_namespaced_pod_log(
                name, self.namespace, container=CONTAINER, previous=previous,
                _preload_content=False, _request_timeout=self.request_timeout)
        except ApiException as exc:
            if exc.status in (400, 404):  # container not started yet, or pod gone
                return
            raise
        splitter = LineSplitter()
        for line in splitter.feed(response.data) + splitter.flush():
            yield label, line

    # following -----------------------------------------------------------------
    def follow(self) -> Iterator[tuple[str, str]]:
        """Merged lines of all pods as they arrive, until the job is finished."""
        lines: queue.Queue = queue.Queue()
        seen: dict[str, _Seen] = {}
        streams: list[threading.Thread] = []
        ended_at = None
        while True:
            done = self.finished()
            for pod in self.list_pods():
                self._visit(pod, seen.setdefault(pod["metadata"]["name"], _Seen()), lines, streams)
            deadline = time.monotonic() + self.poll_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    yield lines.get(timeout=left)
                except queue.Empty:
                    break
            if done:
                ended_at = ended_at or time.monotonic()
                if not any(t.is_alive() for t in streams) or time.monotonic() - ended_at > 30:
                    while not lines.empty():
                        yield lines.get_nowait()
                    return

    def _visit(self, pod: dict, seen: _Seen, lines: queue.Queue, streams: list) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"].get("uid", "")
        status = container_status(pod)
        restarts, state = status.get("restartCount", 0), status.get("state") or {}
        label = self.label(name)
        if restarts > 0 and (uid, restarts - 1) not in seen.streamed:
            seen.streamed.add((uid, restarts - 1))  # crashed before we could follow it
            for item in self._read_all(name, previous=True):
                lines.put(item)
        if not (state.get("running") or state.get("terminated")) or (uid, restarts) in seen.streamed:
            return
        if seen.streamed and uid in seen.uids:
            lines.put((label, f"── container restarted (restart {restarts}) ──"))
        elif seen.uids:
            lines.put((label, "── pod recreated ──"))
        seen.streamed.add((uid, restarts))
        seen.uids.add(uid)
        thread = threading.Thread(target=self._stream, args=(name, label, uid, restarts, lines),
                                  name=f"logs-{name}", daemon=True)
        thread.start()
        streams.append(thread)

    def _still_running(self, name: str, uid: str, restarts: int) -> bool:
        try:
            pod = read_json(self.core.read_namespaced_pod(
                name, self.namespace, _preload_content=False, _request_timeout=self.request_timeout))
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return False
        status = container_status(pod)
        return (pod["metadata"].get("uid") == uid and status.get("restartCount", 0) == restarts
                and bool((status.get("state") or {}).get("running")))

    def _stream(self, name: str, label: str, uid: str, restarts: int, lines: queue.Queue) -> None:
        """Follow one container; on a read timeout, reopen from shortly before the last line."""
        seen = _Replay()
        while True:
            since = None if seen.last_at is None else int(time.monotonic() - seen.last_at) + 5
            seen.reopen()
            splitter = LineSplitter()
            try:
                response = self.core.read_namespaced_pod_log(
                    name, self.namespace, container=CONTAINER, follow=True, timestamps=True,
                    since_seconds=since, _preload_content=False,
                    _request_timeout=(self.request_timeout[0], self.read_timeout_s))
                for chunk in response.stream(4096):
                    for line in splitter.feed(chunk):
                        key, text = split_timestamp(line)
                        if seen.is_new(key):
                            lines.put((label, text))
                for line in splitter.flush():
                    lines.put((label, split_timestamp(line)[1]))
                return
            except ApiException:
                return  # the container is gone or not startable: the poller notices
            except (urllib3.exceptions.HTTPError, OSError):
                if not self._still_running(name, uid, restarts):
                    return


class _Replay:
    """Drops the lines a reopened stream repeats, by timestamp (several lines may share one)."""

    def __init__(self) -> None:
        self.last_key: tuple[str, str] | None = None
        self.at_last_key = 0  # lines shown with timestamp last_key
        self.skip = 0
        self.last_at: float | None = None

    def reopen(self) -> None:
        self.skip = self.at_last_key

    def is_new(self, key: tuple[str, str] | None) -> bool:
        if key is not None and self.last_key is not None:
            if key < self.last_key:
                return False
            if key == self.last_key and self.skip > 0:
                self.skip -= 1
                return False
        if key is not None and key == self.last_key:
            self.at_last_key += 1
        elif key is not None:
            self.last_key, self.at_last_key = key, 1
        self.skip, self.last_at = 0, time.monotonic()
        return True
