"""How values look in tables: ages, losses, statuses. Pure functions, easy to test."""

from __future__ import annotations

from rich.text import Text

from core.domain import describe
from core.domain.terminal_text import printable

STATUS_STYLE = {"PENDING": "yellow", "PULLING": "yellow", "INSTALLING_DEPS": "yellow",
                "PREPARING_DATA": "yellow",
                "RENDEZVOUS": "yellow", "RUNNING": "bold cyan", "COMPLETED": "green",
                "FAILED": "bold red", "DELETED": "dim", "READY": "green", "AVAILABLE": "green",
                "UNREACHABLE": "bold red", "BLOCKED": "yellow", "IN_CLUSTER": "cyan"}


def age(seconds: float) -> str:
    return describe.age(seconds)


def loss(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def literal(value: object) -> Text:
    """A value the app did not write (names, hosts, facts, log lines) as plain text: its
    brackets are shown, never parsed as Rich markup (`[/]` would crash, `[@click=…]` act),
    and its escape sequences never reach the terminal."""
    return value if isinstance(value, Text) else Text(printable(value))


def cells(row: tuple) -> tuple[Text, ...]:
    """A table row whose every cell is shown literally (DataTable parses str cells as markup)."""
    return tuple(literal(value) for value in row)


def status(value: str) -> Text:
    return Text(value, style=STATUS_STYLE.get(value, ""))
