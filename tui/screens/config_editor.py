"""The full detailed config in an editor with YAML highlighting. Beside the cursor, the
documentation of the key it is on (type, choices, default). `ctrl+s` checks it in-process
against the typed schema: problems are listed inline with their field path and line,
and the cursor jumps to the first; a valid config is handed back to the form."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Static, TextArea

from core.schema.training_config import check_config_text, field_hint, key_path_at
from tui.messages import ConfigChecked
from tui.screens.base import GeotrainScreen


def yaml_editor(text: str) -> TextArea:
    """A code editor; YAML highlighting when tree-sitter-yaml is installed."""
    editor = TextArea.code_editor(text, id="editor", soft_wrap=False)
    if "yaml" in editor.available_languages:
        try:
            editor.language = "yaml"
        except Exception:  # a language listed but whose grammar cannot load: plain text
            editor.language = None
    return editor


def hint_for(text: str, row: int) -> str:
    """The documentation of the key on `row`, or how to get one when on no key."""
    return field_hint(key_path_at(text, row)) or "move onto a key to see what it means"


class ConfigEditorScreen(GeotrainScreen):
    TITLE = "Detailed config"
    AUTO_FOCUS = "#editor"
    BINDINGS = [
        Binding("ctrl+s", "save", "Check & save", priority=True),
        Binding("escape", "cancel", "Cancel", priority=True),  # before the TextArea, which keeps escape
    ]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.original = text
        self.problems: list = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield yaml_editor(self.original)
        yield Static(hint_for(self.original, 0), id="field-hint", classes="hint", markup=False)
        yield Static("ctrl+s checks and saves · esc cancels (changes are dropped)",
                     id="editor-errors", classes="hint", markup=False)
        yield Footer()

    @on(TextArea.SelectionChanged)
    def _cursor_moved(self, event: TextArea.SelectionChanged) -> None:
        self.query_one("#field-hint", Static).update(
            hint_for(event.text_area.text, event.selection.end[0]))

    def action_save(self) -> None:
        self.query_one("#editor-errors", Static).update("checking…")
        self._check(self.query_one(TextArea).text)

    @work(thread=True, exclusive=True, exit_on_error=False, group="check", name="Checking config")
    def _check(self, text: str) -> None:
        self.post_message(ConfigChecked(text, check_config_text(text)))

    @on(ConfigChecked)
    def _checked(self, message: ConfigChecked) -> None:
        self.problems = message.problems
        if not message.problems:
            self.dismiss(message.text)
            return
        lines = [f"✗ {p.path}" + (f" (line {p.line})" if p.line else "") + f": {p.message}"
                 for p in message.problems]
        box = self.query_one("#editor-errors", Static)
        box.remove_class("hint")
        box.update("\n".join(lines))
        first = next((p.line for p in message.problems if p.line), None)
        if first:
            editor = self.query_one(TextArea)
            editor.move_cursor((first - 1, 0))
            editor.focus()

    def action_cancel(self) -> None:
        self.dismiss(None)
