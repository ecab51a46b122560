"""The deploy form names the datacenters to use on a cluster that spans several."""

import asyncio

from textual.widgets import Select, Static

from core.state.store import Store
from core.workspaces import WorkspaceService
from tests.planner.clusters import seed_three_datacenters
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.workspace_deploy import DeployScreen


def test_the_form_shows_the_datacenter_choice_and_why(geotrain_home):
    store = Store()
    seed_three_datacenters(store, lon_mbit=4)  # at 10 Mbit/s ultra's H=205 hides even 1.3b's exchange
    app = make_app(WorkspaceService(store), poll_seconds=0)

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("c")
            await on_screen(pilot, DeployScreen)
            await until(pilot, lambda: app.screen.query_one("#model", Select).value == "gpt-neo")
            app.screen.query_one("#cluster", Select).value = "eu"
            advice = app.screen.query_one("#plan", Static)
            await until(pilot, lambda: "Datacenters: use all 3" in str(advice.render()), 30)  # tiny
            app.screen.query_one("#size", Select).value = "1.3b"  # a payload lon's link cannot carry
            await until(pilot, lambda: "Datacenters: use ams" in str(advice.render()), 30)
            text = str(advice.render())
            assert "Datacenters: use ams and fra (24 GPUs), preset " in text
            assert "dropping lon (behind a 4 Mbit/s link) finishes sooner" in text
    asyncio.run(run())
