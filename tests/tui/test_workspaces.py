"""Pilot tests of the workspaces list: table across clusters, delete with d then y,
help, quit, failures shown as the error modal."""

import asyncio
from pathlib import Path

from textual.widgets import DataTable

from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.modals.help import HelpScreen
from tui.screens.workspaces import WorkspacesScreen
from tui.modals.confirm import ConfirmScreen
from tui.modals.error import ErrorScreen


def _rows(app) -> dict:
    table = app.screen.query_one(DataTable)
    return {key.value: [str(c) for c in table.get_row(key)] for key in table.rows}


def test_table_shows_every_cluster_with_age_status_and_loss(app):
    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(_rows(app)) == 4)
            rows = _rows(app)
            assert rows[states.COMPLETED_ID] == [states.COMPLETED_ID, "local", "gpt-neo tiny",
                                                 "medium", "COMPLETED", "2h",
                                                 f"{states.completed_loss():.4f}"]
            assert rows[states.REMOTE_ID][1] == "eu-west" and rows[states.REMOTE_ID][5] == "2d"
            assert rows[states.RUNNING_ID][4] == "RUNNING"
            assert rows[states.FAILED_ID][4] == "FAILED"
            await pilot.press("slash", *"resnet", "enter")
            await until(pilot, lambda: list(_rows(app)) == [states.REMOTE_ID])
            await pilot.press("escape")
            await until(pilot, lambda: len(_rows(app)) == 4)
    asyncio.run(run())


def test_delete_with_d_then_y_says_what_is_lost_and_removes_everything(app, seeded):
    service, home = seeded
    run_dir = Path(home / "workspaces" / states.COMPLETED_ID)

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(_rows(app)) == 4)
            await pilot.press("home")  # first row: the oldest (on eu-west)
            await pilot.press("down")
            assert app.screen.selected_key() == states.COMPLETED_ID
            await pilot.press("d")
            await on_screen(pilot, ConfirmScreen)
            assert "ephemeral" in app.screen.body and str(run_dir) in app.screen.body
            await pilot.press("x")  # anything but y cancels
            await on_screen(pilot, WorkspacesScreen)
            assert run_dir.exists() and states.COMPLETED_ID in _rows(app)
            await pilot.press("d")
            await on_screen(pilot, ConfirmScreen)
            await pilot.press("y")
            await until(pilot, lambda: states.COMPLETED_ID not in _rows(app))
    asyncio.run(run())
    assert not run_dir.exists()
    assert states.COMPLETED_ID not in [w.id for w in service.list()]


def test_help_lists_the_keys_of_the_view_and_q_quits(app):
    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("question_mark")
            await on_screen(pilot, HelpScreen)
            keys = dict(app.screen.keys)
            assert keys["n"] == "Deploy default" and keys["d"] == "Delete"
            await pilot.press("escape")
            await on_screen(pilot, WorkspacesScreen)
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running)
    asyncio.run(run())


def test_a_failing_core_call_becomes_the_error_modal_with_what_to_do(app, seeded):
    service, _ = seeded

    def broken_delete(workspace_id):
        from core.errors import BackendError
        raise BackendError("the local supervisor did not stop", "kill it by hand, then retry")

    service.delete = broken_delete

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(_rows(app)) == 4)
            await pilot.press("d")
            await on_screen(pilot, ConfirmScreen)
            await pilot.press("y")
            await on_screen(pilot, ErrorScreen)
            assert app.screen.message == "the local supervisor did not stop"
            assert app.screen.hint == "kill it by hand, then retry"
            await pilot.press("escape")
            await on_screen(pilot, WorkspacesScreen)
            assert len(_rows(app)) == 4
    asyncio.run(run())


def test_theme_switches_at_run_time_and_is_remembered(app, seeded):
    service, _ = seeded

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            assert app.theme == "geotrain-dark"
            await pilot.press("ctrl+t")
            assert app.theme == "geotrain-light"
    asyncio.run(run())
    assert service.store.get_setting("tui.theme") == "geotrain-light"
    from tui.app import make_app
    assert make_app(service, **states.app_options()).theme == "geotrain-light"


def _hits(app) -> list[str]:
    """The command palette's current hits, best first (its search runs in a worker)."""
    from textual.widgets import OptionList

    found = app.screen.query(OptionList)
    if not found:
        return []
    options = found.first()
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


def test_colon_opens_the_palette_and_jumps_to_a_workspace_and_to_nodes(app):
    from textual.command import CommandPalette

    from tui.screens.nodes import NodesScreen
    from tui.screens.workspace_detail import WorkspaceDetailScreen

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("colon")
            await on_screen(pilot, CommandPalette)
            await pilot.press(*"open workspace gcn")
            await until(pilot, lambda: _hits(app) and "gcn" in _hits(app)[0])
            await pilot.press("enter")
            await on_screen(pilot, WorkspaceDetailScreen)
            assert app.screen.workspace_id == states.FAILED_ID
            await pilot.press("colon")
            await on_screen(pilot, CommandPalette)
            await pilot.press(*"nodes")
            await until(pilot, lambda: _hits(app) and "Nodes" in _hits(app)[0])
            await pilot.press("enter")
            await on_screen(pilot, NodesScreen)
    asyncio.run(run())


def test_row_keys_over_an_empty_list_say_why_nothing_happened_and_what_to_press(geotrain_home):
    """A newcomer's first l, enter or d (no workspace yet), and d/r on the empty node pool, each say in
    one line what is missing and the key that makes one; over a filter that hides every row, which
    filter and how to clear it (and the empty-list hint stays away). Nothing opens, nothing is asked."""
    from tui.app import make_app
    from tui.screens.nodes import NodesScreen

    app = make_app(poll_seconds=0)

    def said(line: str) -> int:
        return sum(n.message == line for n in app._notifications)

    async def press_and_hear(pilot, key: str, line: str) -> None:
        before = said(line)
        await pilot.press(key)
        await until(pilot, lambda: said(line) == before + 1)

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await on_screen(pilot, WorkspacesScreen)
            await until(pilot, lambda: app.screen.loaded)
            for key, doing in (("l", "open"), ("enter", "open"), ("d", "delete"), ("enter", "open")):
                await press_and_hear(pilot, key, f"Nothing to {doing}: there is no workspace yet. Press n to "
                                                 "deploy the default one, or c to choose.")
                assert isinstance(app.screen, WorkspacesScreen)
            await pilot.press("slash", *"x[b]", "enter")
            await press_and_hear(pilot, "d", "Nothing to delete: no workspace matches the filter 'x[b]' (esc clears it)")
            await pilot.press("escape", "2")
            await on_screen(pilot, NodesScreen)
            await until(pilot, lambda: app.screen.loaded)
            for key, doing in (("d", "remove"), ("r", "refresh")):
                await press_and_hear(pilot, key, f"Nothing to {doing}: there is no node yet. Press i to import a "
                                                 "server over SSH.")
                assert isinstance(app.screen, NodesScreen)
    asyncio.run(run())


def test_a_row_key_before_the_first_load_says_the_list_is_still_loading(app, seeded):
    """On a slow cluster the list comes in after the screen: a key pressed before it says so, not
    'there is no workspace yet'; a filter that then hides every row leaves the empty-list hint away."""
    import threading

    service, _ = seeded
    gate, listing = threading.Event(), service.list
    service.list = lambda: gate.wait(30) and listing()

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("d")
            await until(pilot, lambda: any(n.message == "Nothing to delete: the list is still loading"
                                           for n in app._notifications))
            gate.set()
            await until(pilot, lambda: len(_rows(app)) == 4)
            await pilot.press("slash", *"nothing-like-this", "enter")
            await until(pilot, lambda: not _rows(app))
            assert str(app.screen.query_one("#empty").render()) == ""
    asyncio.run(run())


def test_a_longer_status_widens_its_column_instead_of_being_cut(app, seeded):
    """The list's first load sizes each column; a workspace deployed as PENDING that ends COMPLETED
    was shown as 'COMPLET' (found by a newcomer's first deploy at 120 columns)."""
    from dataclasses import replace

    service, _ = seeded
    first = next(w for w in service.list() if w.id == states.COMPLETED_ID)
    listed = [[replace(first, status="PENDING")]]
    service.list = lambda: listed[0]

    def status_shown() -> str:
        table = app.screen.query_one(DataTable)
        width = table.columns[next(k for k in table.columns if k.value == "status")].get_render_width(table)
        return str(table.get_cell(states.COMPLETED_ID, "status"))[:width - 2 * table.cell_padding]

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: list(_rows(app)) == [states.COMPLETED_ID])
            assert status_shown() == "PENDING"
            listed[0] = [first]
            await pilot.press("r")
            await until(pilot, lambda: _rows(app)[states.COMPLETED_ID][4] == "COMPLETED")
            assert status_shown() == "COMPLETED"
    asyncio.run(run())
