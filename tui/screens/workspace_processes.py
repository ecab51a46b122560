"""One level down from a workspace (issue 43): its worker processes or pods, with state, restarts and
last events; the highlighted one's describe-like detail below; `s` a shell in its environment."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Footer, Header, Static

from core.domain.terminal_text import printable
from core.errors import GeotrainError
from tui.messages import ProcessesLoaded
from tui.screens.base import GeotrainScreen


def detail_text(row) -> Text:
    """The describe-like block; every value (environment, output, events) is literal text."""
    text = Text.assemble((printable(row.name), "bold"), f"  {printable(row.state)}")
    width = max((len(key) for key, _ in row.detail), default=0)
    for key, value in row.detail:
        text.append(f"\n{key:<{width}}  ", style="dim").append(printable(value))
    for event in row.events:
        text.append("\nevent  ", style="dim").append(printable(event))
    return text


class WorkspaceProcessesScreen(GeotrainScreen):
    TITLE = "Workers"
    AUTO_FOCUS = "#processes"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("r", "reload", "Refresh"),
        Binding("s", "shell", "Shell"),
    ]

    def __init__(self, workspace_id: str) -> None:
        super().__init__()
        self.workspace_id = workspace_id
        self.sub_title = workspace_id
        self.rows: list = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="processes", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="describe-box"):
            yield Static("loading…", id="describe")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("worker", "pid / node", "datacenter", "state", "restarts", "last event")
        self.action_reload()

    @work(thread=True, exclusive=True, exit_on_error=False, name="Listing the workers")
    def action_reload(self) -> None:
        self.post_message(ProcessesLoaded(self.app.service.processes(self.workspace_id)))

    @on(ProcessesLoaded)
    def _show(self, message: ProcessesLoaded) -> None:
        table = self.query_one(DataTable)
        keep = table.cursor_row
        table.clear()
        self.rows = message.rows
        for row in self.rows:
            where = row.node or (str(row.pid) if row.pid else "-")
            table.add_row(*(Text(printable(str(cell))) for cell in (
                row.name, where, row.datacenter or "-", row.state, row.restarts,
                row.events[-1] if row.events else "-")))
        if self.rows:
            table.move_cursor(row=min(keep, len(self.rows) - 1))
        self._describe()

    @on(DataTable.RowHighlighted)
    def _describe(self) -> None:
        row = self.selected()
        self.query_one("#describe", Static).update(
            detail_text(row) if row else Text(f"{self.workspace_id} has no worker processes or pods now."))

    def selected(self):
        index = self.query_one(DataTable).cursor_row
        return self.rows[index] if 0 <= index < len(self.rows) else None

    def action_shell(self) -> None:
        row = self.selected()
        if row is None or row.rank is None:
            self.notify("pick a worker first", severity="warning")
            return
        try:
            target = self.app.service.shell(self.workspace_id, row.rank)
        except GeotrainError as exc:
            self.notify(printable(str(exc)), severity="error", markup=False)
            return
        self.app.run_in_terminal(target)
        self.action_reload()

    def action_back(self) -> None:
        self.app.pop_screen()
