"""Pilot: geotrain's event lines read as short events in the workspace log, `e` (shown in
the footer) hides and shows them; malformed events and markup-like text stay literal."""

import asyncio
import json

from textual.widgets._footer import FooterKey

from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.widgets.log_view import LogView

EVENTS = [
    {"kind": "joined", "rank": 1, "step": 0, "outer_step": 0, "source": 0, "reason": "start"},
    {"kind": "resumed", "rank": 1, "step": 40},
    {"kind": "outer_step", "rank": 1, "step": 3, "members": [0, 1], "world": 3},
    {"kind": "data", "stage": "done", "source": "[bold red]c4[/]", "unit": "tokens", "done": 10, "seconds": 1},
]
MALFORMED = 'geotrain-event {"kind": "joined", "rank": [/]'


def test_events_read_as_events_and_e_hides_them(app, seeded):
    _, home = seeded
    log1 = home / "workspaces" / states.RUNNING_ID / "logs" / "worker-1.log"
    with open(log1, "a") as handle:
        handle.writelines("geotrain-event " + json.dumps(e) + "\n" for e in EVENTS)
        handle.write(MALFORMED + "\n")

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            app.push_screen(WorkspaceDetailScreen(states.RUNNING_ID))
            await on_screen(pilot, WorkspaceDetailScreen)
            view = app.screen.query_one(LogView)
            await until(pilot, lambda: view.line_count == states.log_line_count(states.RUNNING_UPTO) + len(EVENTS) + 1)
            keys = {(k.key, k.description) for k in app.screen.query(FooterKey)}
            assert ("e", "Events") in keys
            shown = [text for _, text, _ in view._lines]
            assert "▸ joined: rank 1 at step 0 (outer step 0), state from rank 0" in shown
            assert "▸ recovered from step 40: rank 1 loaded its newest checkpoint" in shown
            assert "▸ outer step 3 averaged over 2 of 3 (ranks 0, 1)" in shown
            assert "▸ data ready: [bold red]c4[/]: 10 tokens in 1s" in shown  # literal, not markup
            assert MALFORMED in shown  # not an event: the raw line
            rows = view.row_count
            assert rows == view.line_count

            await pilot.press("e")
            recorded = states.event_line_count(states.RUNNING_UPTO)  # the real run's own events
            await until(pilot, lambda: view.row_count == rows - len(EVENTS) - recorded)
            assert not any(row[1].startswith("▸ ") for row in view._rows)
            assert any(row[1] == MALFORMED for row in view._rows)
            assert view.border_subtitle.endswith("events hidden")
            await pilot.press("e")
            await until(pilot, lambda: view.row_count == rows)
            assert view.border_subtitle == "following the end"
    asyncio.run(run())
