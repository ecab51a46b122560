"""Widgets, one per file: log view, charts, tables, dialogs. They import core and tui.messages,
never a screen."""
