"""A cluster's network matrix: latency and bandwidth for every ordered pair of nodes,
colour-coded so slow WAN links stand out (green fast, yellow usable, red slow)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

FAST_MBIT, USABLE_MBIT = 500.0, 100.0


def cell(latency_ms: float | None, mbit_s: float | None) -> Text:
    if mbit_s is None:
        return Text("—", style="dim")
    style = "green" if mbit_s >= FAST_MBIT else "yellow" if mbit_s >= USABLE_MBIT else "bold red"
    latency = f"{latency_ms:.1f} ms · " if latency_ms is not None else ""
    return Text(f"{latency}{mbit_s:,.0f} Mbit/s", style=style)


class NetMatrix(DataTable):
    DEFAULT_CSS = "NetMatrix { height: auto; max-height: 14; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="cell", zebra_stripes=False)

    def show(self, rows: list[tuple[str, str, float | None, float | None]]) -> None:
        """`rows`: (src, dst, latency_ms, mbit_s) for the measured ordered pairs."""
        self.clear(columns=True)
        nodes = sorted({r[0] for r in rows} | {r[1] for r in rows})
        found = {(src, dst): (lat, bw) for src, dst, lat, bw in rows}
        self.add_column("from \\ to", key="src")
        for node in nodes:
            self.add_column(Text(node), key=node)
        for src in nodes:
            self.add_row(Text(src, style="bold"),
                         *[Text("·", style="dim") if src == dst else cell(*found.get((src, dst), (None, None)))
                           for dst in nodes], key=src)
