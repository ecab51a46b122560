"""Pilot test of the deploy form: requirements not met are a table under the form and
nothing is submitted; ctrl+s again with the same choices deploys anyway (the CLI's
--force). The cluster is FakeKubeAPI, a stand-in for an API server; the rest is real."""

from __future__ import annotations

import asyncio

from textual.widgets import Input, Select, Static

from core.requirements.report import Finding, Report
from core.workspaces import WorkspaceService
from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.workspace_deploy import DeployScreen
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.widgets.requirements_table import RequirementsTable


async def _choose(pilot, app, selector: str, value: str) -> None:
    app.screen.query_one(selector, Select).value = value
    await pilot.pause()


def test_the_form_shows_the_table_submits_nothing_then_deploys_anyway(cluster, fake):
    cluster(var_lib_free_gb=40.0)
    service = WorkspaceService()
    app = make_app(service, **states.app_options())

    async def run():
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.press("c")
            await on_screen(pilot, DeployScreen)
            screen = app.screen
            await until(pilot, lambda: screen.query_one("#model", Select).value == "gpt-neo")
            await _choose(pilot, app, "#cluster", "mycluster")
            await _choose(pilot, app, "#model", "wav2vec2")
            await until(pilot, lambda: "base" in screen.models.get("wav2vec2", []))
            await _choose(pilot, app, "#size", "base")
            screen.query_one("#workers", Input).value = "2"
            await pilot.pause()
            await pilot.press("ctrl+s")
            table = screen.query_one(RequirementsTable)
            await until(pilot, lambda: table.display and table.row_count == 2)
            rows = table.texts()
            assert [r[:2] for r in rows] == [("gpu-a", "disk"), ("gpu-b", "disk")]
            assert all("40 GB free under /var/lib" in r[2] and "dataset 250 GB" in r[3] for r in rows)
            problem = str(screen.query_one("#form-error", Static).render())
            assert "nothing was submitted" in problem and "ctrl+s again to deploy anyway" in problem
            assert "ignoring disk on gpu-a, disk on gpu-b." in problem
            assert app.screen is screen and service.list(refresh=False) == [] and fake.jobs() == []

            await pilot.press("ctrl+s")  # the same choices again: go on anyway
            await on_screen(pilot, WorkspaceDetailScreen)
            assert [w.id for w in service.list(refresh=False)] == [app.screen.workspace_id]
            assert len(fake.jobs()) == 1
    asyncio.run(run())


def test_table_text_from_nodes_is_shown_literally():
    app = make_app(WorkspaceService(), **states.app_options())
    hostile = "[bold red]boom[/] \x1b[31mred"

    async def run():
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.press("c")
            await on_screen(pilot, DeployScreen)
            table = app.screen.query_one(RequirementsTable)
            table.show(Report([Finding("gpu-a", "facts", hostile, "fresh facts", "[link=x]refresh[/link]")]))
            await pilot.pause()
            assert table.texts() == [("gpu-a", "facts", "[bold red]boom[/] red", "fresh facts",
                                      "[link=x]refresh[/link]")]
            table.show(None)
            assert not table.display
    asyncio.run(run())


def test_n_deploys_the_default_only_when_its_requirements_are_met(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "not-a-key")
    service = WorkspaceService()
    app = make_app(service, **states.app_options())

    async def run():
        async with app.run_test(size=(140, 45)) as pilot:
            await pilot.press("n")
            await until(pilot, lambda: any("Not deployed" in n.message for n in app._notifications))
            shown = next(n.message for n in app._notifications if "Not deployed" in n.message)
            assert "1 requirement not met" in shown and "W&B key on all nodes" in shown
            assert service.list(refresh=False) == []
    asyncio.run(run())
