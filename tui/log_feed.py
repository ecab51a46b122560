"""Reading a (worker, line) iterator in a thread and posting it to a LogView in batches.

A pump thread drains the (possibly blocking) iterator into a bounded buffer; the reader
gathers what is there into one batch every few milliseconds. At most `depth` batches
are in flight: the reader waits for the view to take one before posting the next, so
a flood of lines slows the reader, never the UI (backpressure).
"""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Iterator

from tui.messages import LogBatch

class BatchGate:
    """Slots for batches in flight between a reader thread and the widget."""

    def __init__(self, depth: int = 2) -> None:
        self._slots = threading.Semaphore(depth)

    def acquire(self, timeout: float) -> bool:
        return self._slots.acquire(timeout=timeout)

    def release(self) -> None:
        self._slots.release()


class _Pending:
    """Lines the pump has read and the reader has not yet taken, bounded (the pump
    waits when full). A list under a condition: far cheaper per line than a Queue."""

    def __init__(self, capacity: int) -> None:
        self.items: list[tuple[str, str]] = []
        self.capacity = capacity
        self.ended = False
        self.error: BaseException | None = None
        self.cond = threading.Condition()


def _pump(lines: Iterable[tuple[str, str]], pending: _Pending, stop: threading.Event,
          max_batch: int) -> None:
    items, cond = pending.items, pending.cond
    try:
        for item in lines:
            with cond:
                while len(items) >= pending.capacity and not stop.is_set():
                    cond.wait(0.1)
                if stop.is_set():
                    return
                items.append(item)
                if len(items) == max_batch:
                    cond.notify_all()
    except BaseException as exc:  # handed to the reader, which raises it in its worker
        pending.error = exc
    finally:
        with cond:
            pending.ended = True
            cond.notify_all()


def batches(lines: Iterable[tuple[str, str]], cancelled: Callable[[], bool],
            max_batch: int = 1000, max_wait: float = 0.05) -> Iterator[list[tuple[str, str]]]:
    """Group lines into batches; a batch is closed after `max_wait` s or `max_batch` lines."""
    pending = _Pending(max_batch * 4)
    stop = threading.Event()
    threading.Thread(target=_pump, args=(lines, pending, stop, max_batch), daemon=True,
                     name="log-pump").start()
    cond = pending.cond
    try:
        while not cancelled():
            with cond:
                cond.wait_for(lambda: len(pending.items) >= max_batch or pending.ended, max_wait)
                batch = pending.items[:max_batch]
                del pending.items[:max_batch]
                finished = pending.ended and not pending.items
                cond.notify_all()
            if batch:
                yield batch
            if finished:
                break
        if pending.error is not None:
            raise pending.error
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
