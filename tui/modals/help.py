"""`?`: the keys of the view underneath, and the keys that work everywhere."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

GLOBAL_KEYS = [
    ("?", "this help"), (":", "jump anywhere (command palette)"), ("ctrl+p", "command palette"),
    ("/", "filter the current list or log"), ("esc", "back / close"), ("ctrl+t", "switch theme"),
    ("q", "quit"),
]


def key_label(key: str) -> str:
    return {"question_mark": "?", "colon": ":", "slash": "/", "escape": "esc",
            "enter": "enter"}.get(key, key)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]

    def __init__(self, view_title: str, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.view_title = view_title
        self.keys = keys

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog", classes="help"):
            yield Static(f"Keys — {self.view_title}", classes="dialog-title", markup=False)
            yield Static(self._table(self.keys), classes="dialog-body")
            yield Static("Everywhere", classes="dialog-title")
            yield Static(self._table(GLOBAL_KEYS), classes="dialog-body")
            yield Static("[b]esc[/]  close", classes="dialog-keys")

    @staticmethod
    def _table(keys: list[tuple[str, str]]) -> str:
        return "\n".join(f"[b]{key:>8}[/]  {text}" for key, text in keys)

    def action_close(self) -> None:
        self.dismiss(None)
