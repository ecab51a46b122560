"""How values look in tables: ages, losses, statuses. Pure functions, easy to test."""

from __future__ import annotations

from rich.text import Text

STATUS_STYLE = {"PENDING": "yellow", "RUNNING": "bold cyan", "COMPLETED": "green",
                "FAILED": "bold red", "DELETED": "dim", "READY": "green", "AVAILABLE": "green",
                "UNREACHABLE": "bold red", "BLOCKED": "yellow", "IN_CLUSTER": "cyan"}


def age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def loss(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def status(value: str) -> Text:
    return Text(value, style=STATUS_STYLE.get(value, ""))
