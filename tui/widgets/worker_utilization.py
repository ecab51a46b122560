"""Each worker's CPU, network wait and GPU figures, with a sparkline of its recent CPU share and
network wait (issue 43): the figures the supervisor keeps in utilization.json, oldest first."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from core.domain.terminal_text import printable


def figures_text(name: str, figures: dict) -> Text:
    """'worker-0  CPU  17%  wait   1%  GPU  40%' (GPU only where the worker has one)."""
    gpu = f"  GPU {figures['gpu']:3.0f}%" if "gpu" in figures else ""
    return Text(f"{printable(name)[:12]:<12} CPU {100 * figures['cpu']:3.0f}%  "
                f"wait {100 * figures['wait_ratio']:3.0f}%{gpu}")


class WorkerRow(Horizontal):
    """One worker: its last figures, then sparklines of its CPU share and network wait."""

    DEFAULT_CSS = """
    WorkerRow { height: 1; }
    WorkerRow > .figures { width: 42; }
    WorkerRow > Sparkline { width: 1fr; margin-right: 1; }
    """

    def __init__(self, name: str, samples: list[dict]) -> None:
        super().__init__()
        self.worker, self.samples = name, samples

    def compose(self) -> ComposeResult:
        yield Static(figures_text(self.worker, self.samples[-1]), classes="figures")
        yield Sparkline([s["cpu"] for s in self.samples], classes="cpu")
        yield Sparkline([s["wait_ratio"] for s in self.samples], classes="wait")

    def show(self, samples: list[dict]) -> None:
        self.samples = samples
        self.query_one(".figures", Static).update(figures_text(self.worker, samples[-1]))
        self.query_one(".cpu", Sparkline).data = [s["cpu"] for s in samples]
        self.query_one(".wait", Sparkline).data = [s["wait_ratio"] for s in samples]


class WorkerUtilization(Vertical):
    """A row per worker; hidden until a worker has reported (local: the supervisor keeps the figures; pods: read from their logs)."""

    DEFAULT_CSS = """
    WorkerUtilization { height: auto; max-height: 10; border: round $panel-lighten-2; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: dict[str, WorkerRow] = {}
        self.border_title = "utilization · CPU and network wait, recent"
        self.display = False

    def show(self, history: dict[str, list[dict]]) -> None:
        """Update from {worker: [figures, oldest first]}; a worker's row stays once shown."""
        for name, samples in sorted(history.items(), key=lambda item: _worker_order(item[0])):
            if not samples:
                continue
            row = self.rows.get(name)
            if row is None:
                self.rows[name] = WorkerRow(name, samples)
                self.mount(self.rows[name])
            elif row.samples != samples:
                row.show(samples)
        self.display = bool(self.rows)


def _worker_order(name: str) -> tuple[int, str]:
    number = name.rpartition("-")[2]
    return (int(number), name) if number.isdigit() and len(number) < 7 else (1 << 30, name)
