"""A bounded, fast log view: lines from many workers, each worker in its own colour.

Line API (render_line) over a deque, so ingesting a batch costs O(batch) and a frame
renders only the visible rows. Following the end is on until the user scrolls up;
`follow()` resumes it. Filter hides lines, search highlights and jumps, wrap folds.
geotrain's own event lines (`geotrain-event {json}`) show as one readable line each
(core.domain.run_events), in italics, and `show_events` hides or shows them all.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

from rich.segment import Segment
from rich.style import Style
from textual import on
from textual.geometry import Size
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.strip import Strip

from core.domain import run_events
from core.domain.terminal_text import printable
from tui.log_feed import BatchGate
from tui.messages import LogBatch
from tui.palettes import worker_colours

_WRAP_FACTOR = 4  # rows kept per line when wrapping, to bound memory
_SETTLE_TRIES = 50  # refreshes to wait for the layout that lets a scroll to the end take
_EVENT_STYLE = Style(italic=True)


def clean(text: str) -> str:
    """A worker's line as shown: no escape sequence or control character (core.domain.terminal_text)."""
    text = printable(text.rstrip("\r"))
    return text.expandtabs(4) if "\t" in text else text


class LogView(ScrollView, can_focus=True):
    DEFAULT_CSS = "LogView { background: $surface; }"

    following: var[bool] = var(True)
    wrap: var[bool] = var(False)
    show_events: var[bool] = var(True)

    def __init__(self, max_lines: int = 20_000, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.gate = BatchGate()
        self.ended = False
        self._lines: deque[tuple[str, str, bool]] = deque(maxlen=max_lines)  # worker, text, is an event
        self._rows: deque[tuple[str, str, bool, bool]] = deque(maxlen=max_lines)  # …, continued, event
        self._workers: dict[str, int] = {}
        self._filter = ""
        self._search = ""
        self._width = 0
        self._styles: dict[str, Style] = {}
        self._moving = False  # True while we scroll (so it is not taken as the user's)
        self._end_pending = False

    # ingesting ---------------------------------------------------------------
    @on(LogBatch)
    def _on_batch(self, message: LogBatch) -> None:
        message.stop()
        try:
            self.ended = self.ended or message.ended
            self.add_lines(message.lines)
        finally:
            self.gate.release()

    def add_lines(self, lines: Iterable[tuple[str, str]]) -> None:
        rows_before = len(self._rows)
        for worker, text in lines:
            if worker not in self._workers:
                self._workers[worker] = len(self._workers)
                self._styles.clear()
            text = clean(text)
            readable = run_events.readable(text) if run_events.EVENT_PREFIX in text else None
            item = (worker, text, False) if readable is None else (worker, run_events.MARK + readable, True)
            self._lines.append(item)
            if self._matches(item):
                self._add_rows(item)
        if len(self._rows) != rows_before or len(self._rows) == self._rows.maxlen:
            self._resize()

    def _matches(self, item: tuple[str, str, bool]) -> bool:
        if item[2] and not self.show_events:
            return False
        return not self._filter or self._filter in item[1].lower()

    def _add_rows(self, item: tuple[str, str, bool]) -> None:
        worker, text, event = item
        if not self.wrap:
            self._rows.append((worker, text, False, event))
            if len(text) > self._width:
                self._width = len(text)
            return
        width = max(10, self.scrollable_content_region.width - self._prefix_width())
        for start in range(0, max(len(text), 1), width):
            self._rows.append((worker, text[start:start + width], start > 0, event))

    def _rebuild(self) -> None:
        following = self.following
        self._rows = deque(maxlen=self.max_lines * (_WRAP_FACTOR if self.wrap else 1))
        self._width = 0
        for item in self._lines:
            if self._matches(item):
                self._add_rows(item)
        self._resize()
        self.following = following
        if following:
            self._to_end()
        self.refresh()

    def _resize(self) -> None:
        width = 0 if self.wrap else self._width + self._prefix_width()
        self.virtual_size = Size(width, len(self._rows))
        if self.following:
            self._to_end()
        self.refresh()

    # following ---------------------------------------------------------------
    def _to_end(self) -> None:
        self._moving = True
        try:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        finally:
            self._moving = False
        if not self._end_pending:  # again once the new size is laid out
            self._end_pending = True
            self.call_after_refresh(self._settle_end, _SETTLE_TRIES)

    def _settle_end(self, tries: int) -> None:
        """Scroll to the end again after a refresh. A scroll is ignored until layout has given the
        view its vertical scrollbar, and on a loaded machine that can take more than one refresh."""
        if self.following and self.scroll_y < self.max_scroll_y:
            self._moving = True
            try:
                self.scroll_end(animate=False, immediate=True, x_axis=False)
            finally:
                self._moving = False
            if self.scroll_y < self.max_scroll_y and tries > 1:
                self.call_after_refresh(self._settle_end, tries - 1)
                return
        self._end_pending = False

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value < old_value and not self._moving:
            self.following = False

    def follow(self) -> None:
        self.following = True
        self._to_end()

    def watch_wrap(self) -> None:
        self._rebuild()

    def watch_show_events(self) -> None:
        self._rebuild()

    def on_resize(self) -> None:
        if self.wrap:
            self._rebuild()

    # filter and search -------------------------------------------------------
    def set_filter(self, text: str) -> None:
        self._filter = text.strip().lower()
        self._rebuild()

    def search(self, text: str, forward_from: int | None = None) -> bool:
        """Highlight `text` and scroll to its next row; returns False when absent."""
        self._search = text.strip().lower()
        self.refresh()
        if not self._search:
            return False
        start = int(self.scroll_y) + 1 if forward_from is None else forward_from
        count = len(self._rows)
        for offset in range(count):
            index = (start + offset) % count
            if self._search in self._rows[index][1].lower():
                self.following = False
                self._moving = True
                try:
                    self.scroll_to(y=max(0, index - self.size.height // 2), animate=False,
                                   immediate=True)
                finally:
                    self._moving = False
                self.following = False
                return True
        return False

    @property
    def line_count(self) -> int:
        return len(self._lines)

    @property
    def row_count(self) -> int:
        return len(self._rows)

    def visible_text(self) -> list[str]:
        """The rows on screen now, as plain text (for tests and screen readers)."""
        top = int(self.scroll_y)
        return [f"{w} {t}" for w, t, _, _ in list(self._rows)[top:top + self.size.height]]

    # rendering ---------------------------------------------------------------
    def _prefix_width(self) -> int:
        return max((len(w) for w in self._workers), default=0) + 3

    def _style(self, worker: str) -> Style:
        if not self._styles:
            colours = worker_colours(self.app.current_theme)
            for name, index in self._workers.items():
                self._styles[name] = Style(color=colours[index % len(colours)], bold=True)
            self._styles[""] = Style(reverse=True, bold=True)
        return self._styles[worker]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self._rows):
            return Strip.blank(width, base)
        worker, text, continued, event = self._rows[index]
        prefix = " " * (self._prefix_width() - 1) if continued else \
            f"{worker:>{self._prefix_width() - 3}} │"
        body = base + _EVENT_STYLE if event else base
        segments = [Segment(prefix + " ", self._style(worker)), *self._text_segments(text, body)]
        strip = Strip(segments)
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    def _text_segments(self, text: str, base: Style) -> list[Segment]:
        if not self._search or self._search not in text.lower():
            return [Segment(text, base)]
        out, lower, start, size = [], text.lower(), 0, len(self._search)
        mark = base + self._style("")
        while (found := lower.find(self._search, start)) >= 0:
            out += [Segment(text[start:found], base), Segment(text[found:found + size], mark)]
            start = found + size
        out.append(Segment(text[start:], base))
        return out
