"""Asks for an SSH key's passphrase: typed hidden, Enter unlocks, Escape gives up.

The passphrase goes straight to the key loader and is never stored or logged."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class PassphraseScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, key_path: str) -> None:
        super().__init__()
        self.key_path = key_path

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm"):
            yield Static("SSH key passphrase", classes="dialog-title")
            yield Static(f"{self.key_path} is encrypted. Type its passphrase to unlock it for this "
                         "import; geotrain does not keep it.", classes="dialog-body", markup=False)
            yield Input(password=True, placeholder="passphrase", id="passphrase")
            yield Static("[b]enter[/]  unlock    [b]esc[/]  cancel", classes="dialog-keys")

    def on_mount(self) -> None:
        self.query_one("#passphrase", Input).focus()

    @on(Input.Submitted, "#passphrase")
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
