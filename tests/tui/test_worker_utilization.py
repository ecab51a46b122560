"""The workspace view's per-worker utilization (issue 43): each worker's last CPU, network-wait and
GPU figures and sparklines of its recent ones, read from what the real supervisor history keeps
(utilization.json, bounded), updated on the next poll; hidden while no worker has reported."""

import asyncio
import json

from textual.widgets import Sparkline

from core.backends.local.run_history import UTILIZATION_KEPT, RunHistory, read_utilization_history
from core.domain.run_events import EVENT_PREFIX
from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.widgets.worker_utilization import WorkerRow, WorkerUtilization


def event(rank: int, step: int, cpu: float, wait_s: float, **more) -> str:
    return EVENT_PREFIX + json.dumps({"kind": "utilization", "rank": rank, "step": step, "wall_s": 2.0,
                                      "cpu": cpu, "wait_s": wait_s, **more})


def test_the_history_is_bounded_and_oldest_first(tmp_path):
    history = RunHistory(tmp_path, workers=1)
    for step in range(UTILIZATION_KEPT + 15):
        history.worker_line("worker-0", event(0, step, 0.01 * (step % 90), 0.1))
    history.worker_line("worker-0", event(0, 999, -1.0, 0.1))  # refused: not kept
    kept = read_utilization_history(tmp_path)["worker-0"]
    assert [s["step"] for s in kept] == list(range(15, UTILIZATION_KEPT + 15))
    saved = json.loads((tmp_path / "utilization.json").read_text())
    saved["worker-0"]["recent"].append({"rank": 0, "wall_s": 1.0, "cpu": "all", "wait_s": 0})
    saved["worker-9"] = {"recent": "not a list"}
    (tmp_path / "utilization.json").write_text(json.dumps(saved))
    assert [s["step"] for s in read_utilization_history(tmp_path)["worker-0"]][-1] == UTILIZATION_KEPT + 14
    assert "worker-9" not in read_utilization_history(tmp_path)


def test_each_worker_shows_its_figures_and_sparklines(app, seeded):
    _, home = seeded
    run_dir = home / "workspaces" / states.RUNNING_ID
    history = RunHistory(run_dir, workers=2)

    async def run():
        async with app.run_test(size=(120, 44)) as pilot:
            app.push_screen(WorkspaceDetailScreen(states.RUNNING_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            panel = app.screen.query_one(WorkerUtilization)
            await until(pilot, lambda: "RUNNING" in str(app.screen.query_one("#status").render()))
            assert not panel.display  # nothing reported yet: no empty box
            for step, (cpu0, cpu1) in enumerate([(0.2, 0.9), (0.4, 0.7), (0.6, 0.5)]):
                history.worker_line("worker-0", event(0, 10 * step, cpu0, 0.2))
                history.worker_line("worker-1", event(1, 10 * step, cpu1, 1.0, gpu=40.0))
            app.screen._poll()
            await until(pilot, lambda: len(app.screen.query(WorkerRow)) == 2)
            rows = list(app.screen.query(WorkerRow))
            assert panel.display
            assert [r.worker for r in rows] == ["worker-0", "worker-1"]
            await until(pilot, lambda: rows[0].query_one(".cpu", Sparkline).data == [0.2, 0.4, 0.6])
            assert rows[1].query_one(".wait", Sparkline).data == [0.5, 0.5, 0.5]
            text = str(rows[1].query_one(".figures").render())
            assert "CPU  50%" in text and "wait  50%" in text and "GPU  40%" in text
            assert "GPU" not in str(rows[0].query_one(".figures").render())
            history.worker_line("worker-0", event(0, 40, 0.8, 0.0))  # the next interval
            app.screen._poll()
            await until(pilot, lambda: rows[0].query_one(".cpu", Sparkline).data == [0.2, 0.4, 0.6, 0.8])
            assert "CPU  80%" in str(rows[0].query_one(".figures").render())
    asyncio.run(run())
