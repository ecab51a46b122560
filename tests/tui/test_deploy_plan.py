"""`ctrl+r` in the deploy form takes the planner's advice: its preset in the form, and the H it
lowered to and its overlap choice as `--set` items on what ctrl+s deploys. Advice is for the
cluster, model, size and workers it was computed for: change one, or the preset, and it is
no longer applied."""

import asyncio

import yaml
from textual.widgets import Input, Select, Static, TextArea

from core.domain import recipe_catalog
from core.domain.records import Cluster, Node
from core.state.cluster_records import save_cluster
from core.state.node_records import add_nodes
from core.state.store import Store
from core.workspaces import WorkspaceService
from tests.planner.clusters import seed_three_datacenters
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.messages import PlanAdvice
from tui.screens.config_editor import ConfigEditorScreen
from tui.screens.workspace_deploy import DeployScreen


def _seeded_store() -> Store:
    store = Store()
    seed_three_datacenters(store)  # "eu": three datacenters, one 10 Mbit/s link
    add_nodes(store, [Node(name=f"bare-{i}", host=f"198.51.100.{20 + i}", username="root", datacenter=dc,
                           cluster="bare") for i, dc in enumerate(("a", "b"))])
    save_cluster(store, Cluster(name="bare", kind="geotrain"), create=True)  # no network matrix measured
    return store


def _text(form, selector: str) -> str:
    return str(form.query_one(selector, Static).render())


def _run_form(cluster: str, expected: str, check, size: str | None = None) -> None:
    """Open the deploy form on `cluster` (and `size`), wait for the Planner line to show
    `expected`, then run `check(app, pilot)`."""
    app = make_app(WorkspaceService(_seeded_store()), poll_seconds=0)

    async def run():
        async with app.run_test(size=(140, 44)) as pilot:
            await pilot.press("c")
            await on_screen(pilot, DeployScreen)
            form = app.screen
            await until(pilot, lambda: form.query_one("#model", Select).value == "gpt-neo")
            form.query_one("#cluster", Select).value = cluster
            if size:
                form.query_one("#size", Select).value = size
            await until(pilot, lambda: expected in _text(form, "#plan"), 30)
            await check(app, pilot)
    asyncio.run(run())


def _deploys(app):
    """The workspace spec ctrl+s in the form would deploy now."""
    return app.service.build_spec(app.screen.request())


async def _use_plan(pilot, form) -> None:
    await pilot.press("ctrl+r")
    await until(pilot, lambda: "Using the planner's advice" in _text(form, "#config-state"), 30)


def test_ctrl_r_deploys_the_planners_preset_at_its_own_h(geotrain_home):
    # eu's slowest link is 10 Mbit/s: tiny gpt-neo's bf16 pseudo-gradient (265 KB) takes ~0.25 s, so at the
    # assumed 1 s/step `low` keeps 95% from H = 5 up; the planner goes no lower than 8, low's own H
    async def check(app, pilot):
        form = app.screen
        assert form.query_one("#preset", Select).value == "medium"  # the form's default until ctrl+r
        await pilot.press("ctrl+r")
        assert form.request().sets == ("diloco.inner_steps=null", "diloco.overlap=false")  # ctrl+s right after
        assert "(preset low, the preset's own H, overlap off)" in _text(form, "#config-state")
        assert form.query_one("#preset", Select).value == "low"
        assert form.config_text is None  # the advice rides on the form, not on a frozen config
        spec = _deploys(app)
        assert spec.config["gradient_compression"] == "low"
        assert spec.config["diloco"]["inner_steps"] is None and spec.config["diloco"]["overlap"] is False
    _run_form("eu", "Planner: preset low:", check)


def test_ctrl_r_turns_overlap_on_and_a_size_change_drops_the_advice(geotrain_home):
    # gpt-neo 125m over the same link needs high's 1-bit signs hidden behind compute
    async def check(app, pilot):
        form = app.screen
        assert "with overlap: ~100% GPU utilization" in _text(form, "#plan")
        assert "; overlapped runs ended 3-9% higher in loss at equal steps; ctrl+r uses it" in _text(form, "#plan")
        await _use_plan(pilot, form)
        assert "(preset high, H=19, overlap on)" in _text(form, "#config-state")
        spec = _deploys(app)
        assert spec.config["diloco"]["inner_steps"] == 19 and spec.config["diloco"]["overlap"] is True

        form.query_one("#size", Select).value = "tiny"  # advice for 125m says nothing about tiny
        await until(pilot, lambda: "no longer applied: the size changed" in _text(form, "#config-state"))
        assert form.applied is None
        spec = _deploys(app)
        shipped = recipe_catalog.default_config("gpt-neo", "tiny")["diloco"]
        assert spec.config["size"] == "tiny"
        assert spec.config["diloco"]["inner_steps"] == shipped["inner_steps"]
        assert spec.config["diloco"]["overlap"] == shipped["overlap"]
        await until(pilot, lambda: "Planner: preset low:" in _text(form, "#plan"), 30)  # the new advice
    _run_form("eu", "Planner: preset high at H=19 (diloco.inner_steps: 19) with overlap", check, size="125m")


def test_choosing_another_preset_after_ctrl_r_drops_the_advice(geotrain_home):
    async def check(app, pilot):
        form = app.screen
        await _use_plan(pilot, form)
        form.query_one("#preset", Select).value = "medium"
        await until(pilot, lambda: "the preset is now medium" in _text(form, "#config-state"))
        spec = _deploys(app)
        assert spec.config["gradient_compression"] == "medium" and spec.config["diloco"]["inner_steps"] is None
    _run_form("eu", "Planner: preset high at H=19", check, size="125m")  # advice that lowers H


def test_advice_for_choices_the_form_no_longer_has_is_ignored(geotrain_home):
    # a planner answer that arrives after the user moved on (here: advice for 125m while tiny is chosen)
    async def check(app, pilot):
        form = app.screen
        shown, plan = _text(form, "#plan"), form.plan
        form.post_message(PlanAdvice("Planner: stale advice", plan, ("eu", "gpt-neo", "125m", "2")))
        await pilot.pause()
        assert _text(form, "#plan") == shown and form.plan is plan
        assert form.plan_key == ("eu", "gpt-neo", "tiny", form.query_one("#workers", Input).value)
    _run_form("eu", "Planner: preset low:", check)


def test_ctrl_r_on_an_edited_config_keeps_the_users_edits(geotrain_home):
    async def check(app, pilot):
        form = app.screen
        config = _deploys(app).config
        config["optim"]["lr"] = 0.0007
        form._edited(yaml.safe_dump(config, sort_keys=False))  # what saving in the config editor calls
        await _use_plan(pilot, form)
        assert "on top of your edited detailed config" in _text(form, "#config-state")
        spec = _deploys(app)
        assert spec.config["optim"]["lr"] == 0.0007
        assert spec.config["diloco"]["inner_steps"] == 19 and spec.config["gradient_compression"] == "high"
    _run_form("eu", "Planner: preset high at H=19", check, size="125m")


def test_ctrl_r_on_local_takes_ddp_and_leaves_h_to_the_preset(geotrain_home):
    async def check(app, pilot):
        form = app.screen
        await _use_plan(pilot, form)
        assert "(preset none, the preset's own H, overlap off)" in _text(form, "#config-state")
        assert form.query_one("#preset", Select).value == "none"
        spec = _deploys(app)
        assert spec.config["gradient_compression"] == "none" and spec.config["diloco"]["inner_steps"] is None
    _run_form("local", "Planner: preset none: ~100% GPU utilization on local", check)


def test_ctrl_r_without_an_estimate_says_why_and_changes_nothing(geotrain_home):
    async def check(app, pilot):
        form = app.screen
        await pilot.press("ctrl+r")
        await until(pilot, lambda: "no measured network matrix" in _text(form, "#form-error"))
        assert "planner has no estimate" in _text(form, "#form-error")
        assert form.applied is None and form.query_one("#preset", Select).value == "medium"
    _run_form("bare", "Planner: no estimate", check)


def test_ctrl_r_before_the_planner_answers_says_to_wait(geotrain_home):
    async def check(app, pilot):
        form = app.screen
        form.query_one("#workers", Input).value = "3"  # new choices: the advice shown is for 2 workers
        form.action_use_plan()  # ctrl+r in the same tick, before the planner has seen 3 workers
        assert "no planner advice yet" in _text(form, "#form-error")
        await pilot.pause()
        assert form.applied is None and form.query_one("#preset", Select).value == "medium"
    _run_form("eu", "Planner: preset low:", check)


async def _edit(app, pilot, change=None) -> None:
    """ctrl+e, optionally change the editor's text, ctrl+s: back on the form with it saved."""
    await pilot.press("ctrl+e")
    await on_screen(pilot, ConfigEditorScreen, 30)
    editor = app.screen.query_one(TextArea)
    assert "applied on top when you deploy: diloco.inner_steps=" in editor.text.splitlines()[0]
    if change:
        editor.text = change(editor.text)
    await pilot.press("ctrl+s")
    await on_screen(pilot, DeployScreen, 30)


def test_advice_saved_through_the_editor_still_drops_on_a_size_change(geotrain_home):
    # the editor shows the config without the advice (a comment names it): saving it unchanged
    # keeps the advice as --set items, which a later change of size drops
    async def check(app, pilot):
        await _use_plan(pilot, app.screen)
        await _edit(app, pilot)
        form = app.screen
        assert form.applied is not None and "with the planner's advice" in _text(form, "#config-state")
        assert _deploys(app).config["diloco"]["inner_steps"] == 19
        form.query_one("#size", Select).value = "tiny"
        await until(pilot, lambda: "the size changed" in _text(form, "#config-state"))
        spec = _deploys(app)
        shipped = recipe_catalog.default_config("gpt-neo", "tiny")["diloco"]
        assert spec.config["diloco"]["inner_steps"] == shipped["inner_steps"]
        assert spec.config["diloco"]["overlap"] == shipped["overlap"]
    _run_form("eu", "Planner: preset high at H=19", check, size="125m")


def test_h_set_in_the_editor_replaces_the_advice(geotrain_home):
    async def check(app, pilot):
        await _use_plan(pilot, app.screen)
        await _edit(app, pilot, lambda text: text.replace("inner_steps: null", "inner_steps: 50", 1))
        form = app.screen
        assert form.applied is None and "replace the planner's advice" in _text(form, "#config-state")
        assert _deploys(app).config["diloco"]["inner_steps"] == 50
    _run_form("eu", "Planner: preset low:", check)


def test_no_estimate_for_old_choices_is_not_given_as_the_reason_for_new_ones(geotrain_home):
    async def check(app, pilot):
        form = app.screen
        form.query_one("#cluster", Select).value = "eu"
        form.action_use_plan()  # before the planner has seen eu: bare's reason would be wrong
        assert "no planner advice yet" in _text(form, "#form-error")
    _run_form("bare", "Planner: no estimate", check)
