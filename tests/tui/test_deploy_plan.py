"""`ctrl+r` in the deploy form takes the planner's advice: its preset in the form, and the H it
lowered to and its overlap choice in the detailed config that is deployed."""

import asyncio

import yaml
from textual.widgets import Select, Static

from core.state.store import Store
from core.workspaces import WorkspaceService
from tests.planner.clusters import seed_three_datacenters
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.workspace_deploy import DeployScreen


def _form_with_advice(cluster: str, expected: str):
    """Run the app, open the form on `cluster`, wait for advice containing `expected`, then call back."""
    store = Store()
    seed_three_datacenters(store)
    app = make_app(WorkspaceService(store), poll_seconds=0)

    async def run(check):
        async with app.run_test(size=(140, 44)) as pilot:
            await pilot.press("c")
            await on_screen(pilot, DeployScreen)
            await until(pilot, lambda: app.screen.query_one("#model", Select).value == "gpt-neo")
            app.screen.query_one("#cluster", Select).value = cluster
            advice = app.screen.query_one("#plan", Static)
            await until(pilot, lambda: expected in str(advice.render()) and app.screen.plan is not None, 30)
            await check(app, pilot)
    return run


def test_ctrl_r_puts_the_planners_preset_h_and_overlap_into_what_is_deployed(geotrain_home):
    # eu's slowest link is 10 Mbit/s: tiny gpt-neo's bf16 pseudo-gradient (265 KB) takes ~0.25 s, so at the
    # assumed 1 s/step `low` keeps 95% from H = 5 up; the planner goes no lower than 8
    async def check(app, pilot):
        form = app.screen
        assert form.query_one("#preset", Select).value == "medium"  # the form's default until ctrl+r
        await pilot.press("ctrl+r")
        state = form.query_one("#config-state", Static)
        await until(pilot, lambda: "planner's advice" in str(state.render()), 30)
        assert "(preset low, H=8)" in str(state.render())
        assert form.query_one("#preset", Select).value == "low"
        config = yaml.safe_load(form.config_text)
        assert config["gradient_compression"] == "low"
        assert config["diloco"]["inner_steps"] == 8 and config["diloco"]["overlap"] is False
        spec = app.service.build_spec(form.request())  # what ctrl+s would deploy
        assert spec.config["diloco"]["inner_steps"] == 8 and spec.config["gradient_compression"] == "low"
    asyncio.run(_form_with_advice("eu", "Planner: preset low at H=8 (diloco.inner_steps: 8)")(check))


def test_ctrl_r_on_local_takes_ddp_and_leaves_h_to_the_preset(geotrain_home):
    async def check(app, pilot):
        form = app.screen
        await pilot.press("ctrl+r")
        state = form.query_one("#config-state", Static)
        await until(pilot, lambda: "planner's advice" in str(state.render()), 30)
        assert "(preset none)" in str(state.render())
        config = yaml.safe_load(form.config_text)
        assert config["gradient_compression"] == "none" and config["diloco"]["inner_steps"] is None
        assert form.query_one("#preset", Select).value == "none"
    asyncio.run(_form_with_advice("local", "Planner: preset none: ~100% GPU utilization on local")(check))


def test_ctrl_r_with_no_advice_says_what_to_do_and_changes_nothing(geotrain_home):
    async def check(app, pilot):
        form = app.screen
        form.plan = None  # as between a change of the form's choices and the planner's answer
        await pilot.press("ctrl+r")
        error = form.query_one("#form-error", Static)
        await until(pilot, lambda: "no planner advice yet" in str(error.render()))
        assert form.config_text is None and form.query_one("#preset", Select).value == "medium"
    asyncio.run(_form_with_advice("local", "Planner: preset none")(check))
