"""One row per node, one column per step: a small bar while a step runs, ✓ or ✗ after,
and the node's latest message. Fed ProgressEvents on the UI thread."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from core.domain.terminal_text import printable

_BAR = 8


def bar(progress: float, state: str) -> Text:
    if state == "done":
        return Text("✓ done", style="green")
    if state == "failed":
        return Text("✗ failed", style="bold red")
    if state == "skipped":
        return Text("– skipped", style="dim")
    filled = max(0, min(_BAR, round(progress * _BAR)))
    return Text("█" * filled + "░" * (_BAR - filled), style="cyan")


class ProgressTable(DataTable):
    DEFAULT_CSS = "ProgressTable { height: auto; max-height: 16; }"

    def __init__(self, nodes: list[str], steps: list[str], *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.nodes, self.steps = nodes, steps
        self.states: dict[tuple[str, str], str] = {}

    def on_mount(self) -> None:
        self.add_column("node", key="node")
        for step in self.steps:
            self.add_column(step, key=step, width=_BAR + 2)
        self.add_column("latest", key="latest")
        for node in self.nodes:
            self.add_row(Text(node), *[Text("·", style="dim") for _ in self.steps], "waiting",
                         key=node)

    def update_event(self, node: str, step: str, progress: float, message: str, state: str) -> None:
        if node not in self.nodes or step not in self.steps:
            return
        self.states[(node, step)] = state
        self.update_cell(node, step, bar(progress, state))
        self.update_cell(node, "latest", Text(printable(message[:70]), style="red" if state == "failed" else ""),
                         update_width=True)

    def selected_node(self) -> str | None:
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def finished(self) -> bool:
        return all(self.states.get((n, s)) in ("done", "failed", "skipped")
                   for n in self.nodes for s in self.steps) or \
            any(v == "failed" for v in self.states.values())
