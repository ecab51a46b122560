"""A yes/no question as a modal: `y` answers yes, any other key answers no; a dialog may
offer more keys (delete offers `e`: export first), answered with the key itself."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen["bool | str"]):
    def __init__(self, title: str, body: str, yes_label: str = "y  delete",
                 other_keys: dict[str, str] | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.yes_label = yes_label
        self.other_keys = other_keys or {}

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm"):
            yield Static(self.title_text, classes="dialog-title", markup=False)
            yield Static(self.body, classes="dialog-body", markup=False)
            keys = [(self.yes_label, "bold")]
            for key, label in self.other_keys.items():
                keys += ["    ", (f"{key}  {label}", "bold")]
            yield Static(Text.assemble(*keys, "    any other key  cancel"), classes="dialog-keys")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        self.dismiss(event.key if event.key in self.other_keys else event.key == "y")
