"""Every screen of the app in a fixed state: used by the snapshot tests and by
`python -m tests.tui.make_screenshots`, so the README's pictures are what is tested."""

from __future__ import annotations

from textual.widgets import Select, TextArea

from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.screens.config_editor import ConfigEditorScreen
from tui.screens.help import HelpScreen
from tui.screens.node_import import NodeImportScreen
from tui.screens.nodes import NodesScreen
from tui.screens.workspace_deploy import DeployScreen
from tui.screens.workspace_detail import WorkspaceDetailScreen
from tui.screens.workspaces import WorkspacesScreen
from tui.widgets.confirm import ConfirmScreen
from tui.widgets.error_modal import ErrorScreen
from tui.widgets.log_view import LogView


def _rows(app) -> int:
    return app.screen.query_one("DataTable").row_count


async def workspaces(pilot) -> None:
    await on_screen(pilot, WorkspacesScreen)
    await until(pilot, lambda: _rows(pilot.app) == 4)


async def workspaces_light(pilot) -> None:
    pilot.app.theme = "geotrain-light"
    await workspaces(pilot)


async def workspace_detail(pilot) -> None:
    await workspaces(pilot)
    pilot.app.push_screen(WorkspaceDetailScreen(states.COMPLETED_ID))
    await on_screen(pilot, WorkspaceDetailScreen)
    view = pilot.app.screen.query_one(LogView)
    await until(pilot, lambda: view.ended and view.line_count == 64)
    await until(pilot, lambda: pilot.app.screen.query_one("#loss").points != [])
    await until(pilot, lambda: "COMPLETED" in str(pilot.app.screen.query_one("#status").render()))


async def delete_confirm(pilot) -> None:
    await workspaces(pilot)
    await pilot.press("home", "d")  # the first row: the workspace on eu-west
    await on_screen(pilot, ConfirmScreen)


async def deploy_form(pilot) -> None:
    await workspaces(pilot)
    await pilot.press("c")
    await on_screen(pilot, DeployScreen)
    await until(pilot, lambda: pilot.app.screen.query_one("#size", Select).value == "tiny")


async def config_editor_error(pilot) -> None:
    await deploy_form(pilot)
    await pilot.press("ctrl+e")
    await on_screen(pilot, ConfigEditorScreen, 30)
    editor = pilot.app.screen.query_one(TextArea)
    editor.text = editor.text.replace("  lr: 0.003", "  lr: very-fast", 1)
    await pilot.press("ctrl+s")
    await until(pilot, lambda: bool(pilot.app.screen.problems), 30)


async def nodes(pilot) -> None:
    await pilot.press("2")
    await on_screen(pilot, NodesScreen)
    await until(pilot, lambda: _rows(pilot.app) == 2)
    await pilot.press("down")


async def node_import(pilot) -> None:
    await nodes(pilot)
    await pilot.press("i")
    await on_screen(pilot, NodeImportScreen)


async def help_keys(pilot) -> None:
    await workspaces(pilot)
    await pilot.press("question_mark")
    await on_screen(pilot, HelpScreen)


async def error_modal(pilot) -> None:
    from core.errors import BackendError

    await workspaces(pilot)
    pilot.app.push_screen(ErrorScreen("Deploy failed", BackendError(
        "the local supervisor did not start", "see ~/.local/share/geotrain/workspaces/x/logs")))
    await on_screen(pilot, ErrorScreen)


VIEWS = {
    "workspaces": workspaces,
    "workspaces-light": workspaces_light,
    "workspace-detail": workspace_detail,
    "delete-confirm": delete_confirm,
    "deploy-form": deploy_form,
    "config-editor-error": config_editor_error,
    "nodes": nodes,
    "node-import": node_import,
    "help": help_keys,
    "error": error_modal,
}
SIZE = (120, 36)
