"""The table of a list screen (workspaces, nodes): a DataTable whose enter, over no rows, is the
screen's to answer (the screen says why nothing opened) instead of doing nothing."""

from __future__ import annotations

from textual.actions import SkipAction
from textual.widgets import DataTable


class RecordTable(DataTable):
    def action_select_cursor(self) -> None:
        if not self.row_count:
            raise SkipAction()  # the binding goes on to the screen's own enter
        super().action_select_cursor()
