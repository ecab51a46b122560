"""The home view: every workspace on every cluster, refreshed by a timer."""

from __future__ import annotations

import os

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from core.workspaces import DeployRequest
from tui import formatting
from tui.screens.table_screen import TableScreen
from tui.widgets.record_table import RecordTable
from tui.messages import WorkspaceDeleted, WorkspaceDeployed, WorkspacesLoaded

COLUMNS = ("id", "cluster", "model", "preset", "status", "age", "last loss")


def env_tokens() -> dict[str, str | None]:
    return {"wandb": os.environ.get("WANDB_API_KEY"), "hf": os.environ.get("HF_TOKEN")}


class WorkspacesScreen(TableScreen):
    TITLE = "Workspaces"
    AUTO_FOCUS = "#workspaces"
    COLUMNS = COLUMNS
    POLL = True
    NOUN = "workspace"
    EMPTY_HINT = "Press n to deploy the default one, or c to choose."
    FILTER_PLACEHOLDER = "filter: id, cluster, model, status…"
    BINDINGS = [
        Binding("n", "deploy_default", "Deploy default"),
        Binding("c", "deploy_form", "Deploy…"),
        Binding("enter", "open", "Open", show=False),
        Binding("l", "open", "Logs"),
        Binding("d", "delete", "Delete"),
        Binding("r", "reload", "Refresh"),
        *TableScreen.FILTER_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.workspaces: dict[str, object] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield RecordTable(id="workspaces", cursor_type="row", zebra_stripes=True)
        yield Static("", id="empty", classes="hint")
        yield Footer()

    # loading ---------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="load", name="Loading workspaces")
    def _load(self) -> None:
        self.post_message(WorkspacesLoaded(self.app.service.list()))

    @on(WorkspacesLoaded)
    def _show(self, message: WorkspacesLoaded) -> None:
        self.workspaces = {ws.id: ws for ws in message.workspaces}
        self.loaded = True
        self.refill()

    def _row(self, ws) -> tuple:
        return (ws.id, ws.cluster, f"{ws.spec.model} {ws.spec.size}", ws.spec.preset,
                formatting.status(ws.status), formatting.age(self.app.clock() - ws.created_at),
                formatting.loss(ws.last_loss))

    def refill(self) -> None:
        """Update the table in place (changed cells, new rows, gone rows); when many rows
        come or go at once (a filter), rebuild it, which is much faster."""
        table = self.query_one(DataTable)
        wanted = {ws.id: row for ws in self.workspaces.values()
                  if self.matches((row := self._row(ws))[:5])}
        gone = [k for k in table.rows if k.value not in wanted]
        if len(gone) + len(wanted) - (len(table.rows) - len(gone)) > 20:
            selected = self.selected_key()
            table.clear()
            for ws_id, row in wanted.items():
                table.add_row(*formatting.cells(row), key=ws_id)
            if selected in wanted:
                table.move_cursor(row=table.get_row_index(selected), animate=False)
        else:
            for key in gone:
                table.remove_row(key)
            for ws_id, row in wanted.items():
                if ws_id not in table.rows:
                    table.add_row(*formatting.cells(row), key=ws_id)
                    continue
                for column, value in zip(COLUMNS, row):
                    if str(table.get_cell(ws_id, column)) != str(value):  # a column grows to a longer value
                        table.update_cell(ws_id, column, formatting.literal(value), update_width=True)
        empty = self.query_one("#empty", Static)
        empty.update("" if self.workspaces else  # a filter that hides every row is said by the filter box
                     "No workspaces yet. Press [b]n[/] to deploy the default (tiny gpt-neo, 2 workers,"
                     " medium compression, on local) or [b]c[/] to choose.")

    # actions ---------------------------------------------------------------
    @on(DataTable.RowSelected)
    def action_open(self) -> None:
        if (ws_id := self.chosen_key("open")) is not None:
            self.app.open_workspace(ws_id)

    def action_deploy_default(self) -> None:
        self.notify("Deploying the default workspace on local…")
        self._deploy_default()

    @work(thread=True, exclusive=True, exit_on_error=False, group="deploy", name="Deploy")
    def _deploy_default(self) -> None:
        from core.requirements.check import check_before_deploy  # the checks load with a deploy

        service = self.app.service
        spec, tokens = service.build_spec(DeployRequest()), env_tokens()
        report = check_before_deploy(service.store, spec, tokens)
        if not report.ok:  # the deploy form (c) shows the table, and can go on anyway
            self.app.call_from_thread(self.notify, f"Not deployed: {report.summary()} ({report.ignoring_briefly()}). "
                                      "Press c: the deploy form shows what to do.", severity="error", markup=False)
            return
        self.post_message(WorkspaceDeployed(service.deploy(spec, tokens)))

    def action_deploy_form(self) -> None:
        self.app.action_deploy_form()

    @on(WorkspaceDeployed)
    def _deployed(self, message: WorkspaceDeployed) -> None:
        self.notify(f"Deployed {message.workspace.id}", markup=False)
        self.action_reload()
        self.app.open_workspace(message.workspace.id)

    def action_delete(self) -> None:
        if (ws_id := self.chosen_key("delete")) is not None:
            from tui.actions import ask_delete  # its modals load with the first `d`

            ask_delete(self, ws_id)

    @on(WorkspaceDeleted)
    def _deleted(self, message: WorkspaceDeleted) -> None:
        self.notify(f"Deleted {message.workspace_id}", markup=False)
        self.action_reload()

