"""The requirements table of the deploy form: one row per requirement not met (red) or
not checked (yellow), with what to do. Cells are rich Text, so node facts and server
answers show literally, never as markup."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from core.requirements.report import COLUMNS, FAIL, Report


class RequirementsTable(DataTable):
    DEFAULT_CSS = "RequirementsTable { height: auto; max-height: 12; display: none; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        for name in COLUMNS:
            self.add_column(name, key=name)

    def show(self, report: Report | None) -> None:
        """Fill with the report's rows (hide when there are none)."""
        self.clear()
        rows = [] if report is None else list(zip(report.shown(), report.rows()))
        for finding, cells in rows:
            style = "red" if finding.verdict == FAIL else "yellow"
            self.add_row(*(Text(c, style=style if i == 2 else "") for i, c in enumerate(cells)))
        self.display = bool(rows)

    def texts(self) -> list[tuple[str, ...]]:
        """The rows as plain strings (what a person reads; tests check it)."""
        return [tuple(str(c) for c in self.get_row_at(i)) for i in range(self.row_count)]
