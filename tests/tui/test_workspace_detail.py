"""Pilot tests of the workspace detail: logs of both workers stream in, following stops
when the user scrolls up and resumes on f; filter, search, wrap; metrics curves."""

import asyncio

from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.widgets.log_view import LogView
from tui.widgets.loss_chart import LossChart


def test_logs_arrive_from_both_workers_and_following_stops_on_scroll(app, seeded):
    _, home = seeded
    log1 = home / "workspaces" / states.RUNNING_ID / "logs" / "worker-1.log"

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            app.push_screen(WorkspaceDetailScreen(states.RUNNING_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            view = app.screen.query_one(LogView)
            base = states.log_line_count(states.RUNNING_UPTO)  # the recorded run, cut at step 60
            await until(pilot, lambda: view.line_count == base)
            workers = {w for w, *_ in view._lines}
            assert workers == {"worker-0", "worker-1"}
            with open(log1, "a") as handle:  # the workspace keeps writing
                handle.writelines(f"[rank 1] step {s} loss 2.5\n" for s in range(1000, 1200))
            await until(pilot, lambda: view.line_count == base + 200)
            # the view scrolls to the end on its next refresh (a loaded CI machine saw it before)
            await until(pilot, lambda: view.scroll_y == view.max_scroll_y)
            assert view.following
            assert "step 1199" in view.visible_text()[-1]
            await pilot.press("pageup")
            await until(pilot, lambda: not view.following)
            top = view.scroll_y
            with open(log1, "a") as handle:
                handle.writelines(f"[rank 1] step {s} loss 2.4\n" for s in range(1200, 1300))
            await until(pilot, lambda: view.line_count == base + 300)
            assert view.scroll_y == top  # new lines do not move a reader who scrolled up
            await pilot.press("f")
            await until(pilot, lambda: view.scroll_y == view.max_scroll_y)
            assert view.following
            status = str(app.screen.query_one("#status").render())
            assert "RUNNING" in status and "worker-1" in status
            last = states.metrics_rows(states.RUNNING_UPTO)[-1]
            await until(pilot, lambda: app.screen.query_one("#loss", LossChart).points != [])
            assert app.screen.query_one("#loss", LossChart).points[-1] == (states.RUNNING_UPTO, last["loss"])
            assert app.screen.query_one("#bytes", LossChart).points[-1] == (states.RUNNING_UPTO, last["bytes_sent"])
    asyncio.run(run())


def test_filter_search_and_wrap(app):
    async def run():
        async with app.run_test(size=(70, 40)) as pilot:
            app.push_screen(WorkspaceDetailScreen(states.COMPLETED_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            view = app.screen.query_one(LogView)
            lines = states.log_line_count()
            await until(pilot, lambda: view.line_count == lines and view.ended)
            await pilot.press("slash", *"rank 1] step 120/", "enter")
            await until(pilot, lambda: view.row_count == 1)
            assert "worker-1" in view.visible_text()[0]
            await pilot.press("escape")  # leaves the filter
            await until(pilot, lambda: view.row_count == lines)
            await pilot.press("s", *"step 100/", "enter")
            await until(pilot, lambda: not view.following)
            assert any("step 100/" in row for row in view.visible_text())
            rows = view.row_count
            await pilot.press("w")
            await until(pilot, lambda: view.row_count > rows)  # long lines fold
            await pilot.press("escape", "escape")  # closes the search bar, then the view
            await until(pilot, lambda: not isinstance(app.screen, WorkspaceDetailScreen))
    asyncio.run(run())
