"""The one place failures are shown: what went wrong, and what to do about it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from core.domain.terminal_text import printable
from core.errors import GeotrainError


def describe(error: BaseException) -> tuple[str, str]:
    """(message, what to do) for any exception a worker raised."""
    if isinstance(error, GeotrainError):
        return error.message, error.hint or "check the input and try again"
    name = type(error).__name__
    return f"{name}: {error}", "this looks like a bug; run the same step with the CLI for details"


class ErrorScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter,space,q", "dismiss", "Close")]

    def __init__(self, title: str, error: BaseException) -> None:
        super().__init__()
        self.title_text = title
        self.message, self.hint = map(printable, describe(error))  # a server's or a pod's words, often

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="error"):
            yield Static(self.title_text, classes="dialog-title", markup=False)
            yield Static(self.message, classes="dialog-body", markup=False)
            yield Static(f"What to do: {self.hint}", classes="dialog-hint", markup=False)
            yield Static("[b]esc[/]  close", classes="dialog-keys")

    def action_dismiss(self) -> None:
        self.dismiss(None)
