"""A cluster's last `clusters check` (issue 43): per node and device the matmul rate against the
datasheet, the memory test, ECC/Xids and the verdict; per link the all-reduce's bus bandwidth; each
failing node named with why. Every value came from a rank's output or a tool: shown literally."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from core.domain.terminal_text import printable
from tui import formatting

DEVICE_COLUMNS = ("node", "rank", "device", "matmul TFLOP/s", "datasheet", "memory test", "ECC / Xid", "verdict")
LINK_COLUMNS = ("link", "payload MB", "all-reduce ms", "bus GB/s", "ping ms", "probe Mbit/s", "verdict")


def _gpu_health(node: dict) -> str:
    gpus, xids = node.get("gpus") or [], node.get("xids") or []
    if not gpus:
        return "no GPU tool"
    uncorrected = sum(g.get("ecc_uncorrected") or 0 for g in gpus)
    ecc = "no ECC" if all(g.get("ecc_uncorrected") is None for g in gpus) else f"ECC {uncorrected} uncorr."
    return f"{ecc}, {len(xids)} Xid" + ("" if len(xids) == 1 else "s")


def device_rows(result: dict) -> list[tuple]:
    rows = []
    for node in result.get("nodes") or []:
        for d in node.get("devices") or []:
            expected = d.get("expected_flops")
            memory = (f"{d['memory_tested'] / 2 ** 30:.2f} GiB, {d['memory_errors']} bad"
                      if d.get("memory_tested") else "-")
            rows.append((node["name"], d["rank"], d["device"], f"{d['matmul_flops'] / 1e12:.3g}",
                         f"{expected / 1e12:.0f}" if expected else "-", memory, _gpu_health(node),
                         formatting.status("OK") if d.get("ok") else Text("SLOW/BAD", style="bold red")))
        if not node.get("devices"):  # 'burn_in': why none ran there (e.g. no torch on the node)
            rows.append((node["name"], "-", node.get("burn_in") or "-", "-", "-", "-", _gpu_health(node),
                         Text("NO RESULT", style="bold red") if not node.get("ok", False) else Text("no burn-in", style="dim")))
    return rows


def member_rows(members: list[str], result: dict | None) -> list[tuple]:
    """The cluster's nodes the check did not report on (never checked), so that each can be cordoned."""
    checked = {n["name"] for n in (result or {}).get("nodes") or []}
    return [(name, "-", "-", "-", "-", "-", "-", Text("not checked", style="dim")) for name in members
            if name not in checked]


def link_rows(result: dict) -> list[tuple]:
    def ms(seconds: float) -> str:
        return f"{seconds * 1000:,.0f}" if seconds >= 0.1 else f"{seconds * 1000:.3g}"

    def figure(value, fmt: str) -> str:
        return "-" if not isinstance(value, (int, float)) else format(value, fmt)

    def verdict(link: dict) -> Text:
        if link.get("ok") is False:
            return Text("FAILED" + (f": {link['why']}" if link.get("why") else ""), style="bold red")
        return Text("SLOW", style="bold yellow") if link.get("slow") else formatting.status("OK")

    return [(link["name"], f"{link['bytes'] / 1e6:.3g}", ms(link["seconds"]), f"{link['busbw'] / 1e9:.3g}",
             figure(link.get("ping_ms"), ".2f"), figure(link.get("probe_mbit_s"), ".0f"), verdict(link))
            for link in result.get("links") or []]


def summary(cluster: str, result: dict | None, now: float) -> Text:
    if not cluster:
        return Text("No cluster matches the filter (esc clears it).", style="dim")
    if result is None:
        return Text.assemble((cluster, "bold"), "  not checked yet. Press ", ("k", "bold"),
                             " to burn in each device and time an all-reduce of the presets' size.")
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(result.get("checked_at", 0)))
    text = Text.assemble((printable(cluster), "bold"), f"  checked {when} ",
                         f"({formatting.age(max(0.0, now - result.get('checked_at', now)))} ago): ",
                         ("all good", "green") if result.get("ok") else ("PROBLEMS", "bold red"))
    for node in result.get("nodes") or []:
        for why in node.get("why") or []:
            text.append("\n✗ ", style="bold red").append(printable(f"{node['name']}: {why}"))
    for why in result.get("why") or []:  # cluster-level: failed links
        text.append("\n✗ ", style="bold red").append(printable(str(why)))
    if result.get("slow_link"):
        text.append("\n! ", style="bold yellow").append(printable(f"slowest link: {result['slow_link']}"))
    return text


def failing_nodes(result: dict | None) -> list[str]:
    return [n["name"] for n in (result or {}).get("nodes") or [] if not n.get("ok")]


class CheckResults(Vertical):
    """The summary line(s), the device table and the link table of one cluster's check."""

    def compose(self) -> ComposeResult:
        yield Static("", id="check-summary")
        yield DataTable(id="check-devices", cursor_type="row", zebra_stripes=True)
        yield DataTable(id="check-links", cursor_type="none", zebra_stripes=True)

    def on_mount(self) -> None:
        self.query_one("#check-devices", DataTable).add_columns(*DEVICE_COLUMNS)
        self.query_one("#check-links", DataTable).add_columns(*LINK_COLUMNS)

    def show(self, cluster: str, result: dict | None, now: float, members: list[str] = (),
             cordoned: dict[str, bool] | None = None) -> None:
        self.query_one("#check-summary", Static).update(summary(cluster, result, now))
        devices, links = self.query_one("#check-devices", DataTable), self.query_one("#check-links", DataTable)
        keep = devices.cursor_row
        devices.clear()
        links.clear()
        for row in device_rows(result or {}) + member_rows(list(members), result):
            if (cordoned or {}).get(row[0]):
                row = (*row[:-1], Text.assemble(row[-1], (" cordoned", "yellow")))
            devices.add_row(*formatting.cells(row))
        for row in link_rows(result or {}):
            links.add_row(*formatting.cells(row))
        if devices.row_count:
            devices.move_cursor(row=min(keep, devices.row_count - 1))
        links.display = bool(links.row_count)

    def highlighted_node(self) -> str | None:
        devices = self.query_one("#check-devices", DataTable)
        if not devices.row_count:
            return None
        return str(devices.get_row_at(devices.cursor_row)[0])
