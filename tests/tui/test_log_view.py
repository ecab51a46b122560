"""The log view's buffer is bounded, and the reader path keeps order and delivers all."""

import asyncio
import threading

from textual.app import App, ComposeResult

from tui.log_feed import BatchGate, batches, feed
from tui.widgets.log_view import LogView, clean


class _One(App):
    def compose(self) -> ComposeResult:
        yield LogView(max_lines=1000)


def test_buffer_is_bounded_and_keeps_the_newest_lines():
    async def run():
        app = _One()
        async with app.run_test(size=(80, 20)) as pilot:
            view = app.query_one(LogView)
            view.add_lines((f"worker-{i % 2}", f"line {i}") for i in range(30_000))
            await pilot.pause()
            assert view.line_count == 1000 and view.row_count == 1000
            assert view._lines[0] == ("worker-0", "line 29000", False)
            assert view.following and view.visible_text()[-1].endswith("line 29999")
    asyncio.run(run())


def test_feed_delivers_every_line_in_order_with_backpressure_and_surfaces_errors():
    posted, gate = [], BatchGate(depth=1)

    def post(batch):  # a slow consumer: takes each batch a little later
        posted.append(batch)
        threading.Timer(0.001, gate.release).start()

    lines = [("w", str(i)) for i in range(25_000)]
    assert feed(iter(lines), post, gate, lambda: False) == 25_000
    got = [item for batch in posted for item in batch.lines]
    assert got == lines and posted[-1].ended and max(len(b.lines) for b in posted) <= 1000

    def broken():
        yield ("w", "one")
        raise RuntimeError("stream cut")

    try:
        list(batches(broken(), lambda: False))
    except RuntimeError as exc:
        assert str(exc) == "stream cut"
    else:
        raise AssertionError("the reader's error was swallowed")


def test_clean_strips_ansi_and_tabs():
    assert clean("\x1b[31mred\x1b[0m\tx\r") == "red x"
