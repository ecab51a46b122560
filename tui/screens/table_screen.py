"""A screen around one DataTable of records, with the `/` filter box above it."""

from __future__ import annotations

from textual import on
from textual.binding import Binding
from textual.widgets import DataTable, Input

from tui.screens.base import GeotrainScreen


class TableScreen(GeotrainScreen):
    """Subclasses compose a DataTable (and may compose their `Input#filter`; otherwise it is
    mounted, with FILTER_PLACEHOLDER, the first time `/` is pressed: one widget less to
    draw in the first frame), and implement `_load()` (a thread worker posting the records)
    and `refill()` (records -> rows)."""

    COLUMNS: tuple[str, ...] = ()
    POLL = False  # re-load every app.poll_seconds while the screen exists
    NOUN = "row"  # what a row is, for the line a row key says over an empty list
    EMPTY_HINT = ""  # what to press when the list is empty
    FILTER_PLACEHOLDER = "filter…"

    FILTER_BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter_text = ""
        self.loaded = False  # the first load has come in (subclasses set it when they show it)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for name in self.COLUMNS:
            table.add_column(name, key=name)
        self.call_after_refresh(self.action_reload)  # the empty table paints first; rows follow
        if self.POLL and self.app.poll_seconds:
            self.set_interval(self.app.poll_seconds, self.action_reload)

    def action_reload(self) -> None:
        self._load()

    def _load(self) -> None:
        raise NotImplementedError

    def refill(self) -> None:
        raise NotImplementedError

    def matches(self, cells) -> bool:
        needle = self.filter_text.lower()
        return not needle or needle in " ".join(map(str, cells)).lower()

    def selected_key(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def chosen_key(self, doing: str) -> str | None:
        """The highlighted row's key, for a key that acts on one row; over an empty list it says in
        one line why nothing happened and what to press, instead of doing nothing silently."""
        key = self.selected_key()
        if key is None:
            why = ("the list is still loading" if not self.loaded else
                   f"no {self.NOUN} matches the filter {self.filter_text!r} (esc clears it)" if self.filter_text
                   else f"there is no {self.NOUN} yet. {self.EMPTY_HINT}")
            self.notify(f"Nothing to {doing}: {why}".strip(), severity="warning", markup=False)
        return key

    async def action_filter(self) -> None:
        boxes = self.query("#filter")
        if boxes:
            box = boxes.first(Input)
        else:
            box = Input(placeholder=self.FILTER_PLACEHOLDER, id="filter", classes="hidden")
            await self.mount(box, before=self.query_one(DataTable))
        box.remove_class("hidden")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.refill()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one(DataTable).focus()

    def action_clear_filter(self) -> None:
        for box in self.query("#filter").results(Input):  # none until `/` was first pressed
            box.value = ""
            box.add_class("hidden")
        self.query_one(DataTable).focus()
