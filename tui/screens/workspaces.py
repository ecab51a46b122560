"""The home view: every workspace on every cluster, refreshed by a timer."""

from __future__ import annotations

import os

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from core.workspaces import DeployRequest
from tui import formatting
from tui.screens.base import GeotrainScreen
from tui.messages import WorkspaceDeleted, WorkspaceDeployed, WorkspacesLoaded
from tui.widgets.confirm import ConfirmScreen

COLUMNS = ("id", "cluster", "model", "preset", "status", "age", "last loss")


def env_tokens() -> dict[str, str | None]:
    return {"wandb": os.environ.get("WANDB_API_KEY"), "hf": os.environ.get("HF_TOKEN")}


class WorkspacesScreen(GeotrainScreen):
    TITLE = "Workspaces"
    AUTO_FOCUS = "#workspaces"
    BINDINGS = [
        Binding("n", "deploy_default", "Deploy default"),
        Binding("c", "deploy_form", "Deploy…"),
        Binding("enter", "open", "Open", show=False),
        Binding("l", "open", "Logs"),
        Binding("d", "delete", "Delete"),
        Binding("r", "reload", "Refresh"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.workspaces: dict[str, object] = {}
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: id, cluster, model, status…", id="filter", classes="hidden")
        yield DataTable(id="workspaces", cursor_type="row", zebra_stripes=True)
        yield Static("", id="empty", classes="hint")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for name in COLUMNS:
            table.add_column(name, key=name)
        self.action_reload()
        if self.app.poll_seconds:
            self.set_interval(self.app.poll_seconds, self.action_reload)

    # loading ---------------------------------------------------------------
    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="load", name="Loading workspaces")
    def _load(self) -> None:
        self.post_message(WorkspacesLoaded(self.app.service.list()))

    @on(WorkspacesLoaded)
    def _show(self, message: WorkspacesLoaded) -> None:
        self.workspaces = {ws.id: ws for ws in message.workspaces}
        self._fill()

    def _row(self, ws) -> tuple:
        return (ws.id, ws.cluster, f"{ws.spec.model} {ws.spec.size}", ws.spec.preset,
                formatting.status(ws.status), formatting.age(self.app.clock() - ws.created_at),
                formatting.loss(ws.last_loss))

    def _visible(self) -> list:
        needle = self.filter_text.lower()
        return [ws for ws in self.workspaces.values()
                if not needle or needle in " ".join(map(str, self._row(ws)[:5])).lower()]

    def _fill(self) -> None:
        """Update the table in place: changed cells, new rows, gone rows."""
        table = self.query_one(DataTable)
        wanted = {ws.id: self._row(ws) for ws in self._visible()}
        for key in [k for k in table.rows if k.value not in wanted]:
            table.remove_row(key)
        for ws_id, row in wanted.items():
            if ws_id not in table.rows:
                table.add_row(*row, key=ws_id)
                continue
            for column, value in zip(COLUMNS, row):
                if str(table.get_cell(ws_id, column)) != str(value):
                    table.update_cell(ws_id, column, value)
        empty = self.query_one("#empty", Static)
        empty.update("" if wanted else
                     "No workspaces yet. Press [b]n[/] to deploy the default (tiny gpt-neo, 2 workers,"
                     " medium compression, on local) or [b]c[/] to choose.")

    def selected_id(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    # filter ----------------------------------------------------------------
    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("hidden")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._fill()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one(DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.add_class("hidden")
        self.query_one(DataTable).focus()

    # actions ---------------------------------------------------------------
    @on(DataTable.RowSelected)
    def action_open(self) -> None:
        from tui.screens.workspace_detail import WorkspaceDetailScreen

        if (ws_id := self.selected_id()) is not None:
            self.app.push_screen(WorkspaceDetailScreen(ws_id))

    def action_deploy_default(self) -> None:
        self.notify("Deploying the default workspace on local…")
        self._deploy_default()

    @work(thread=True, exclusive=True, exit_on_error=False, group="deploy", name="Deploy")
    def _deploy_default(self) -> None:
        service = self.app.service
        spec = service.build_spec(DeployRequest())
        self.post_message(WorkspaceDeployed(service.deploy(spec, env_tokens())))

    def action_deploy_form(self) -> None:
        from tui.screens.workspace_deploy import DeployScreen

        self.app.push_screen(DeployScreen())

    @on(WorkspaceDeployed)
    def _deployed(self, message: WorkspaceDeployed) -> None:
        self.notify(f"Deployed {message.workspace.id}")
        self.action_reload()
        from tui.screens.workspace_detail import WorkspaceDetailScreen

        self.app.push_screen(WorkspaceDetailScreen(message.workspace.id))

    def action_delete(self) -> None:
        if (ws_id := self.selected_id()) is not None:
            ask_delete(self, ws_id)

    @on(WorkspaceDeleted)
    def _deleted(self, message: WorkspaceDeleted) -> None:
        self.notify(f"Deleted {message.workspace_id}")
        self.action_reload()


def ask_delete(screen: Screen, workspace_id: str) -> None:
    """Say what will be lost, then delete on `y` (in a thread) and tell `screen`."""
    service = screen.app.service

    def answered(yes: bool | None) -> None:
        if yes:
            _delete(screen, workspace_id)

    @work(thread=True, exit_on_error=False, group="delete", name="Preparing delete")
    def _ask(self) -> None:
        text = service.what_will_be_lost(workspace_id)
        self.app.call_from_thread(self.app.push_screen,
                                  ConfirmScreen(f"Delete {workspace_id}?", text), answered)

    _ask(screen)


@work(thread=True, exit_on_error=False, group="delete", name="Delete")
def _delete(screen: Screen, workspace_id: str) -> None:
    screen.app.service.delete(workspace_id)
    screen.post_message(WorkspaceDeleted(workspace_id))
