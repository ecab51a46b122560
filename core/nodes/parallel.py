"""Run one function per item on threads, each with its own deadline.

Threads are daemons: a server that hangs past its deadline is reported as timed out and
never stalls the others, nor the exit of the program.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Timeout(Exception):
    pass


def run_each(items: Sequence[T], fn: Callable[[T], R], timeout: float,
             max_workers: int = 16) -> list[R | BaseException]:
    """fn(item) for every item, at most `max_workers` at once; results in item order.

    A result is the return value, the exception raised, or `Timeout` when the item's
    call ran longer than `timeout` seconds.
    """
    results: list = [None] * len(items)
    done = [threading.Event() for _ in items]
    slots = threading.Semaphore(max_workers)
    started = [0.0] * len(items)

    def work(index: int) -> None:
        try:
            results[index] = fn(items[index])
        except BaseException as exc:  # handed back to the caller, not lost in the thread
            results[index] = exc
        finally:
            done[index].set()
            slots.release()

    for index in range(len(items)):
        if not slots.acquire(timeout=timeout):  # every worker stuck on a hung server
            results[index] = Timeout(f"not started within {timeout:g}s: all workers busy")
            done[index].set()
            continue
        started[index] = time.monotonic()
        threading.Thread(target=work, args=(index,), daemon=True,
                         name=f"run_each-{index}").start()
    for index, event in enumerate(done):
        left = started[index] + timeout - time.monotonic()
        if not event.wait(max(left, 0)):
            results[index] = Timeout(f"no result within {timeout:g}s")
    return results
