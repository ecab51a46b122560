"""Pilot tests of the deploy form and the detailed-config editor: a real deploy on
`local` (torchrun on gloo), inline errors for bad input, tokens never echoed."""

import asyncio

import pytest
from textual.widgets import Input, Select, Static, TextArea

from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.config_editor import ConfigEditorScreen
from tui.screens.workspace_deploy import DeployScreen
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.widgets.log_view import LogView


async def _open_form(app, pilot):
    await pilot.press("c")
    await on_screen(pilot, DeployScreen)
    await until(pilot, lambda: app.screen.query_one("#model", Select).value == "gpt-neo")


async def _set(pilot, app, selector, text):
    box = app.screen.query_one(selector, Input)
    box.value = text
    await pilot.pause()


@pytest.mark.slow
def test_deploy_on_local_from_the_form_streams_both_workers_to_completion(geotrain_home, monkeypatch):
    from core.workspaces import WorkspaceService

    # with a key the workers would go online, and W&B waits out its 90 s init timeout when there is no
    # network (as in CI); offline keeps the key's path through the form, the store and the workers
    monkeypatch.setenv("WANDB_MODE", "offline")

    service = WorkspaceService()
    app = make_app(service, poll_seconds=0.5)
    secret = "wandb-secrettoken1234567890abcdef1234567890abcdef"  # well-formed, unknown

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await _open_form(app, pilot)
            await _set(pilot, app, "#steps", "20")
            await _set(pilot, app, "#wandb", secret)
            assert secret not in "".join(str(s) for s in app.screen.query_one("#wandb").render_line(0)._segments)
            await pilot.press("ctrl+s")
            await on_screen(pilot, WorkspaceDetailScreen, 60)
            view = app.screen.query_one(LogView)
            workspace_id = app.screen.workspace_id
            await until(pilot, lambda: view.ended, 240)
            workers = {w for w, *_ in view._lines}
            assert {"worker-0", "worker-1"} <= workers
            assert service.status(workspace_id).status == "COMPLETED"
            ws = service.get(workspace_id)
            assert (ws.spec.steps, ws.spec.workers, ws.spec.preset) == (20, 2, "medium")
            assert "wandb" in ws.spec.tokens and secret not in str(ws.spec.to_dict())
            service.delete(workspace_id)
    asyncio.run(run())


def test_bad_form_input_is_shown_inline_and_nothing_is_deployed(app, seeded):
    service, _ = seeded
    before = {w.id for w in service.list(refresh=False)}

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await _open_form(app, pilot)
            await _set(pilot, app, "#workers", "0")
            await pilot.press("ctrl+s")
            error = app.screen.query_one("#form-error", Static)
            await until(pilot, lambda: "workers" in str(error.render()))
            assert "1 or more" in str(error.render())
            await _set(pilot, app, "#workers", "2")
            await _set(pilot, app, "#hf", "two words")
            await pilot.press("ctrl+s")
            await until(pilot, lambda: "hf token" in str(error.render()))
            assert isinstance(app.screen, DeployScreen)
    asyncio.run(run())
    assert {w.id for w in service.list(refresh=False)} == before


async def _open_editor(app, pilot) -> TextArea:
    """The deploy form, then its detailed-config editor (`ctrl+e`)."""
    await _open_form(app, pilot)
    await pilot.press("ctrl+e")
    await on_screen(pilot, ConfigEditorScreen, 30)
    return app.screen.query_one(TextArea)


def test_editing_the_config_with_an_invalid_value_shows_the_error_inline(app):
    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            editor = await _open_editor(app, pilot)
            assert "optim:" in editor.text and editor.language in ("yaml", None)
            lines = editor.text.splitlines()
            row = next(i for i, line in enumerate(lines) if line.strip().startswith("lr:"))
            editor.text = editor.text.replace(lines[row], "  lr: very-fast", 1)
            editor.move_cursor((0, 0))
            await pilot.press("ctrl+s")
            errors = app.screen.query_one("#editor-errors", Static)
            await until(pilot, lambda: "config.optim.lr" in str(errors.render()), 30)
            assert f"line {row + 1}" in str(errors.render())
            assert editor.cursor_location == (row, 0)  # the cursor jumps to the problem
            editor.text = editor.text.replace("  lr: very-fast", "  lr: 0.001", 1)
            editor.text = editor.text.replace("steps: 200", "steps: 77", 1)
            await pilot.press("ctrl+s")
            await on_screen(pilot, DeployScreen, 30)
            assert app.screen.query_one("#steps", Input).value == "77"
            assert "lr: 0.001" in app.screen.config_text
            request = app.screen.request()
            assert request.config_text == app.screen.config_text and request.steps == 77
    asyncio.run(run())


def test_the_editor_shows_the_documentation_of_the_key_at_the_cursor(app):
    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            editor = await _open_editor(app, pilot)
            hint = app.screen.query_one("#field-hint", Static)
            lines = editor.text.splitlines()
            row = next(i for i, line in enumerate(lines) if line.strip().startswith("lr:"))
            editor.move_cursor((row, 4))
            await until(pilot, lambda: "optim.lr: Peak learning rate" in str(hint.render()))
            assert "a float > 0" in str(hint.render()) and "default 0.003" in str(hint.render())
            row = next(i for i, line in enumerate(lines) if line.strip().startswith("schedule:"))
            await pilot.press(*["down"] * (row - editor.cursor_location[0]))  # moved by keys, as a person would
            await until(pilot, lambda: "one of 'cosine', 'constant'" in str(hint.render()))
            row = next(i for i, line in enumerate(lines) if line.strip().startswith("betas:"))
            editor.move_cursor((row, 0))
            # shown literally: as markup, "[0.9, 0.95]" would vanish
            await until(pilot, lambda: "default [0.9, 0.95]" in str(hint.render()))
    asyncio.run(run())
