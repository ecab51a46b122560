"""Benchmark of the app (prints figures; not a timed test).

    python -m tests.tui.bench_app

1. start to first frame: a fresh `python` process that imports the app and runs it
   headless, timed from spawn to its first painted frame;
2. log ingest: a reader thread floods a LogView through the real batching/backpressure
   path (tui.log_feed.feed) while keys are pressed every 100 ms; prints lines/s and the
   key-press latency (target: ≥ 50,000 lines/s with every key answered within 50 ms);
3. a 1,000-row workspaces table: time to fill, to re-poll, to filter, and key latency.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.worker import get_current_worker

ROOT = Path(__file__).resolve().parents[2]

FIRST_FRAME = """
import time, sys
t0 = float(sys.argv[1])
from tui.app import make_app
app = make_app(poll_seconds=0)
def painted():
    print(f"FRAME {time.time() - t0:.3f}", flush=True)
    app.exit()
app.call_after_refresh(lambda: app.call_after_refresh(painted))
app.run(headless=True)
"""


def first_frame(runs: int = 3) -> list[float]:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, GEOTRAIN_HOME=home)
            out = subprocess.run([sys.executable, "-c", FIRST_FRAME, repr(time.time())], cwd=ROOT,
                                 env=env, capture_output=True, text=True, timeout=120)
            line = next(ln for ln in out.stdout.splitlines() if ln.startswith("FRAME"))
            times.append(float(line.split()[1]))
    return times


class KeyLatency:
    """Sends a key, records when its binding ran."""

    def __init__(self) -> None:
        self.sent: float = 0.0
        self.latencies: list[float] = []

    def answered(self) -> None:
        self.latencies.append(time.perf_counter() - self.sent)

    def send(self, app: App, key: str) -> None:
        self.sent = time.perf_counter()
        app.post_message(events.Key(key, key if len(key) == 1 else None))


class LogBench(App):
    BINDINGS = [Binding("x", "ping", "ping")]

    def __init__(self, probe: KeyLatency) -> None:
        super().__init__()
        self.probe = probe
        self.fed = 0

    def compose(self) -> ComposeResult:
        from tui.widgets.log_view import LogView

        yield LogView(max_lines=20_000)

    def action_ping(self) -> None:
        self.probe.answered()

    def flood(self, seconds: float) -> None:
        from tui.log_feed import feed
        from tui.widgets.log_view import LogView

        view = self.query_one(LogView)

        def lines():
            deadline = time.perf_counter() + seconds
            n = 0
            while time.perf_counter() < deadline:
                for _ in range(1000):
                    n += 1
                    yield ("worker-%d" % (n & 3), "[rank 0] step %d loss 2.3456 sent 1024 KB" % n)

        def run() -> None:
            worker = get_current_worker()
            self.fed = feed(lines(), view.post_message, view.gate, lambda: worker.is_cancelled)

        self.run_worker(run, thread=True, name="flood")


async def log_ingest(seconds: float = 5.0) -> dict:
    from tui.widgets.log_view import LogView

    probe = KeyLatency()
    app = LogBench(probe)
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.query_one(LogView)
        ingested = [0]
        original = view.add_lines

        def counting(lines):
            lines = list(lines)
            ingested[0] += len(lines)
            original(lines)

        view.add_lines = counting
        for _ in range(15):  # the same key presses with no log traffic: the baseline
            probe.send(app, "x")
            await asyncio.sleep(0.1)
        idle = sorted(probe.latencies)
        probe.latencies = []
        start = time.perf_counter()
        app.flood(seconds)
        while time.perf_counter() - start < seconds:
            probe.send(app, "x")
            await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - start
        await pilot.pause(0.3)
        lat = sorted(probe.latencies)
    return {"lines": ingested[0], "seconds": round(elapsed, 2),
            "lines_per_s": round(ingested[0] / elapsed),
            "key_presses": len(lat), "key_p50_ms": round(statistics.median(lat) * 1000, 1),
            "key_max_ms": round(lat[-1] * 1000, 1),
            "keys_within_50ms": sum(1 for x in lat if x <= 0.05),
            "idle_key_p50_ms": round(statistics.median(idle) * 1000, 1),
            "idle_key_max_ms": round(idle[-1] * 1000, 1)}


async def big_table(rows: int = 1000) -> dict:
    from tests.tui import states
    from tui.app import make_app
    from tui.screens.workspaces import WorkspacesScreen

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GEOTRAIN_HOME"] = tmp
        from core.state.store import Store
        from core.workspaces import WorkspaceService

        store = Store()
        with store.write() as conn:
            for i in range(rows):
                spec = states.spec("local", "gpt-neo")
                conn.execute("INSERT INTO workspaces(id, cluster, spec, status, last_loss, created_at,"
                             " updated_at) VALUES (?,?,?,?,?,?,?)",
                             (f"gpt-neo-{i:06x}", "local", json.dumps(spec.to_dict()), "COMPLETED",
                              2.0 + i / rows, states.NOW - i * 60, states.NOW))
        start = time.perf_counter()
        app = make_app(WorkspaceService(store), clock=lambda: states.NOW, poll_seconds=0)
        probe = KeyLatency()
        async with app.run_test(size=(120, 40)) as pilot:
            while not isinstance(app.screen, WorkspacesScreen) or \
                    app.screen.query_one("DataTable").row_count < rows:
                await asyncio.sleep(0.005)
            filled = time.perf_counter() - start
            screen = app.screen
            start = time.perf_counter()
            screen.refill()  # what each status poll does with unchanged data
            refill = time.perf_counter() - start
            original = screen.action_reload
            screen.action_reload = lambda: (probe.answered(), original())
            for _ in range(20):
                probe.send(app, "r")
                await pilot.pause(0.05)
            for _ in range(20):
                await pilot.press("down")
            start = time.perf_counter()
            screen.filter_text = "gpt-neo-0003"
            screen.refill()
            filtered = time.perf_counter() - start
            shown = screen.query_one("DataTable").row_count
        lat = sorted(probe.latencies)
    return {"rows": rows, "first_fill_s": round(filled, 3), "poll_refill_ms": round(refill * 1000, 1),
            "filter_ms": round(filtered * 1000, 1), "filtered_rows": shown,
            "key_p50_ms": round(statistics.median(lat) * 1000, 1),
            "key_max_ms": round(lat[-1] * 1000, 1)}


def main() -> int:
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    frames = first_frame()
    print(f"start to first frame (fresh process, import included): "
          f"{', '.join(f'{t:.2f}' for t in frames)} s (median {statistics.median(frames):.2f} s)")
    print("log ingest while pressing keys:", asyncio.run(log_ingest()))
    print("1,000-row workspaces table:", asyncio.run(big_table()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
