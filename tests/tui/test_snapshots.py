"""Snapshot of every screen, from the fixed states of tests/tui/views.py (frozen clock,
fixed data). Update after an intended change: pytest tests/tui --snapshot-update."""

import pytest

from tests.tui import states, views
from tui.app import make_app


@pytest.mark.parametrize("name", list(views.VIEWS))
def test_screen(name, seeded, snap_compare):
    app = make_app(seeded[0], **states.app_options())
    assert snap_compare(app, terminal_size=views.SIZE, run_before=views.steady(views.VIEWS[name]))
