"""One node's wizard log (every command run there, secrets redacted), in a log view."""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static
from textual.worker import get_current_worker

from tui.log_feed import feed
from tui.widgets.log_view import LogView


class NodeLogScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,l,q", "close", "Close"), Binding("r", "reload", "Reload")]

    def __init__(self, node: str, path: Path) -> None:
        super().__init__()
        self.node, self.path = node, path

    def compose(self) -> ComposeResult:
        yield Static(f"{self.node} — {self.path}", classes="dialog-title", markup=False)
        yield LogView(max_lines=5000, id="node-log")

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self.query_one(LogView).set_filter("")
        self._read()

    @work(thread=True, exclusive=True, exit_on_error=False, name="Reading node log")
    def _read(self) -> None:
        view = self.query_one(LogView)
        worker = get_current_worker()
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            text = "(no log yet: nothing has run on this node)"
        lines = ((self.node, line) for line in text.splitlines())
        feed(lines, view.post_message, view.gate, lambda: worker.is_cancelled)

    def action_close(self) -> None:
        self.dismiss(None)
