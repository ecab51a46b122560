"""Pilot: a local workspace that is preparing data shows PREPARING_DATA in the table and
the reason (who, how far) in its detail. The state file is written by the supervisor's
own RunHistory from the worker lines a real run prints."""

import asyncio
import json

from textual.widgets import DataTable, Static

from core.backends.local.run_history import RunHistory
from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.screens.workspace_detail import WorkspaceDetailScreen


def _event(kind: str, **detail) -> str:
    return "geotrain-event " + json.dumps({"kind": kind, "at": 1.0, **detail})


def test_preparing_data_shows_in_the_table_and_the_detail(app, seeded):
    _, home = seeded
    history = RunHistory(home / "workspaces" / states.RUNNING_ID, workers=2)
    history.worker_line("worker-0", _event("data", stage="progress", source="c4", unit="tokens",
                                           done=30000, total=40000, rank=0))
    history.worker_line("worker-1", _event("data", stage="start", source="c4", unit="tokens", rank=1))

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.screen.query_one(DataTable)
            await until(pilot, lambda: states.RUNNING_ID in [k.value for k in table.rows])
            await until(pilot, lambda: str(table.get_row(states.RUNNING_ID)[4]) == "PREPARING_DATA")
            app.push_screen(WorkspaceDetailScreen(states.RUNNING_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            status = app.screen.query_one("#status", Static)
            await until(pilot, lambda: "PREPARING_DATA" in str(status.render()))
            text = str(status.render())
            assert ("(worker-0: preparing c4: 30,000 of 40,000 tokens (75%); worker-1: preparing c4: "
                    "starting)") in text
            assert "worker-1     PREPARING_DATA preparing c4: starting" in text
    asyncio.run(run())
