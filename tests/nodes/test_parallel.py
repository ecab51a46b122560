"""run_each: one slow item never holds up the others' results."""

import threading
import time

from core.nodes.parallel import Timeout, run_each


def test_a_hanging_item_times_out_alone():
    release = threading.Event()

    def work(item):
        if item == "hangs":
            release.wait(30)
        if item == "fails":
            raise ValueError("bad server")
        return item.upper()

    start = time.monotonic()
    results = run_each(["a", "hangs", "fails", "b"], work, timeout=0.5)
    elapsed = time.monotonic() - start
    release.set()
    assert results[0] == "A" and results[3] == "B"
    assert isinstance(results[1], Timeout) and isinstance(results[2], ValueError)
    assert elapsed < 10  # the 0.5 s timeout was honoured, not the 30 s hang


def test_items_run_at_once_not_one_after_another():
    started, finished = {}, {}

    def work(i):
        started[i] = time.monotonic()
        time.sleep(0.3)
        finished[i] = time.monotonic()
        return i

    assert run_each(list(range(8)), work, timeout=30) == list(range(8))
    # every item had started before the first one finished: they ran side by side
    assert max(started.values()) < min(finished.values())
