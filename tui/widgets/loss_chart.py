"""A small braille line chart for one metric over steps (loss, bytes sent).

Our own rather than textual-plotext: a few dozen lines, no extra dependency, and its
output is a pure function of the points and the size, so snapshots stay stable.
"""

from __future__ import annotations

from typing import Callable, Sequence

from rich.text import Text
from textual.widget import Widget

# braille dot bit for (column 0/1, row 0..3) inside one character cell
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_LABEL = 9


def plain_number(value: float) -> str:
    return f"{value:.4g}"


def human_bytes(value: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.3g} {unit}"
        value /= 1000
    return f"{value:.3g} TB"


def braille_rows(points: Sequence[tuple[float, float]], cols: int, rows: int,
                 y_range: tuple[float, float]) -> list[str]:
    """Draw the polyline through `points` on a cols x rows grid of braille cells."""
    dot_w, dot_h = cols * 2, rows * 4
    grid = [[0] * cols for _ in range(rows)]
    xs = [p[0] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = y_range

    def to_dot(x: float, y: float) -> tuple[int, int]:
        dx = 0 if x1 == x0 else round((x - x0) / (x1 - x0) * (dot_w - 1))
        dy = dot_h // 2 if y1 == y0 else round((y1 - y) / (y1 - y0) * (dot_h - 1))
        return dx, dy

    def plot(dx: int, dy: int) -> None:
        grid[dy // 4][dx // 2] |= _DOTS[dx % 2][dy % 4]

    previous = to_dot(*points[0])
    plot(*previous)
    for point in points[1:]:
        current = to_dot(*point)
        steps = max(abs(current[0] - previous[0]), abs(current[1] - previous[1]), 1)
        for i in range(1, steps + 1):
            plot(previous[0] + round((current[0] - previous[0]) * i / steps),
                 previous[1] + round((current[1] - previous[1]) * i / steps))
        previous = current
    return ["".join(chr(0x2800 + cell) for cell in row) for row in grid]


class LossChart(Widget):
    DEFAULT_CSS = "LossChart { height: 8; color: $accent; }"

    def __init__(self, title: str, fmt: Callable[[float], str] = plain_number, *,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.fmt = fmt
        self.points: list[tuple[float, float]] = []

    def set_points(self, points: Sequence[tuple[float, float]]) -> None:
        if list(points) != self.points:
            self.points = list(points)
            self.refresh()

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        if not self.points:
            return Text(f"{self.title}\n  waiting for metrics…", style="dim")
        last_step, last_value = self.points[-1]
        text = Text()
        text.append(f"{self.title} ", style="bold")
        text.append(f"{self.fmt(last_value)} at step {last_step:g}\n", style="dim")
        rows, cols = max(1, height - 1), max(2, width - _LABEL - 1)
        ys = [p[1] for p in self.points]
        low, high = min(ys), max(ys)
        for index, row in enumerate(braille_rows(self.points, cols, rows, (low, high))):
            label = self.fmt(high) if index == 0 else self.fmt(low) if index == rows - 1 else ""
            text.append(f"{label[:_LABEL - 1]:>{_LABEL - 1}} ", style="dim")
            text.append(row + ("\n" if index < rows - 1 else ""))
        return text
