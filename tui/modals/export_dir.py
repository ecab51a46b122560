"""Asks where to export a workspace before deleting it: a directory, prefilled with
~/geotrain-exports/<id>; Enter exports, Escape goes back without exporting."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class ExportDirScreen(ModalScreen["str | None"]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, workspace_id: str, default: str) -> None:
        super().__init__()
        self.workspace_id = workspace_id
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm"):
            yield Static(f"Export {self.workspace_id}", classes="dialog-title", markup=False)
            yield Static("Checkpoints, metrics, logs and the resolved config go into this directory "
                         "(new or empty). A new workspace continues from it with "
                         "`geotrain workspaces deploy … --resume-from DIR`.",
                         classes="dialog-body", markup=False)
            yield Input(value=self.default, id="export-dir")
            yield Static(Text.assemble(("enter", "bold"), "  export    ", ("esc", "bold"), "  back"),
                         classes="dialog-keys")

    def on_mount(self) -> None:
        self.query_one("#export-dir", Input).focus()

    @on(Input.Submitted, "#export-dir")
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
