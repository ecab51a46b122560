"""Reading a (worker, line) iterator in a thread and posting it to a LogView in batches.

A pump thread drains the (possibly blocking) iterator into a bounded queue; the reader
gathers what is there into one batch every few milliseconds. At most `depth` batches
are in flight: the reader waits for the view to take one before posting the next, so
a flood of lines slows the reader, never the UI (backpressure).
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterable, Iterator

from tui.messages import LogBatch

_END = object()


class BatchGate:
    """Slots for batches in flight between a reader thread and the widget."""

    def __init__(self, depth: int = 2) -> None:
        self._slots = threading.Semaphore(depth)

    def acquire(self, timeout: float) -> bool:
        return self._slots.acquire(timeout=timeout)

    def release(self) -> None:
        self._slots.release()


def _pump(lines: Iterable[tuple[str, str]], out: queue.Queue, stop: threading.Event,
          errors: list[BaseException]) -> None:
    try:
        for item in lines:
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
    except BaseException as exc:  # handed to the reader, which raises it in its worker
        errors.append(exc)
    finally:
        out.put(_END)


def batches(lines: Iterable[tuple[str, str]], cancelled: Callable[[], bool],
            max_batch: int = 5000, max_wait: float = 0.05) -> Iterator[list[tuple[str, str]]]:
    """Group lines into batches; a batch is closed after `max_wait` s or `max_batch` lines."""
    pending: queue.Queue = queue.Queue(maxsize=max_batch * 4)
    stop = threading.Event()
    errors: list[BaseException] = []
    threading.Thread(target=_pump, args=(lines, pending, stop, errors), daemon=True,
                     name="log-pump").start()
    try:
        ended = False
        while not ended and not cancelled():
            batch: list[tuple[str, str]] = []
            try:
                item = pending.get(timeout=max_wait)
            except queue.Empty:
                continue
            while True:
                if item is _END:
                    ended = True
                    break
                batch.append(item)
                if len(batch) >= max_batch:
                    break
                try:
                    item = pending.get_nowait()
                except queue.Empty:
                    break
            if batch:
                yield batch
        if errors:
            raise errors[0]
    finally:
        stop.set()


def feed(lines: Iterable[tuple[str, str]], post: Callable[[LogBatch], object], gate: BatchGate,
         cancelled: Callable[[], bool]) -> int:
    """Post every batch of `lines` (waiting on `gate`); returns the number of lines fed."""
    total = 0
    for batch in batches(lines, cancelled):
        while not gate.acquire(timeout=0.1):
            if cancelled():
                return total
        post(LogBatch(batch))
        total += len(batch)
    if not cancelled() and gate.acquire(timeout=1.0):
        post(LogBatch([], ended=True))
    return total
