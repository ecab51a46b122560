"""A labelled form field: the label above its input, one widget for every form."""

from __future__ import annotations

from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Label


class FormField(Vertical):
    """`label` (plain text, never markup) above `field`."""

    DEFAULT_CLASSES = "field"

    def __init__(self, label: str, field: Widget) -> None:
        super().__init__(Label(label, markup=False), field)
