"""The node pool: servers imported over SSH, their facts and what blocks them."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Header, Input, Static

from core.domain import describe
from core.domain.records import Node
from core.domain.terminal_text import printable
from tui import formatting
from tui.messages import CordonDone, NodesLoaded
from tui.screens.table_screen import TableScreen
from tui.widgets.record_table import RecordTable
from tui.modals.confirm import ConfirmScreen

COLUMNS = ("name", "datacenter", "status", "GPUs", "CPU", "memory", "disk", "blockers")


def short_blockers(blockers: list[str], width: int = 30) -> str:
    if not blockers:
        return "—"
    first = blockers[0] if len(blockers[0]) <= width else blockers[0][:width - 1] + "…"
    return first + (f" +{len(blockers) - 1}" if len(blockers) > 1 else "")


def node_row(node: Node) -> tuple:
    datacenter, status, gpu, cores, memory = describe.node_table_row(node)
    disk = node.facts.get("disk", {})
    return (node.name, datacenter, formatting.status(status), gpu, cores, memory,
            f"{disk.get('free_gb', '?')}/{disk.get('total_gb', '?')} GB" if disk else "—",
            short_blockers(node.blockers))


def node_details(node: Node, check: tuple[str, dict] | None = None) -> Text:
    lines = describe.node_panel_lines(node)
    text = Text.assemble((node.name, "bold"), "  ", "\n".join(lines))  # facts come from the server: literal
    for reason in node.blockers:
        text.append("\n").append("✗", style="bold red").append(f" {printable(reason)}")
    if check:
        cluster, verdict = check
        text.append(f"\nlast check on {printable(cluster)}: ")
        text.append("all good", style="green") if verdict.get("ok") else text.append("FAILING", style="bold red")
        for device in verdict.get("devices") or []:
            text.append(printable(f"\n  rank {device.get('rank')} {device.get('device')}: "
                                  f"{device.get('matmul_flops', 0) / 1e12:.3g} TFLOP/s"))
        for why in verdict.get("why") or []:
            text.append("\n✗", style="bold red").append(f" {printable(why)}")
    return text


class NodesScreen(TableScreen):
    TITLE = "Nodes"
    AUTO_FOCUS = "#nodes-table"
    COLUMNS = COLUMNS
    NOUN = "node"
    EMPTY_HINT = "Press i to import a server over SSH."
    BINDINGS = [
        Binding("i", "import", "Import…"),
        Binding("r", "refresh_node", "Refresh facts"),
        Binding("d", "remove", "Remove"),
        Binding("c", "cordon", "Cordon"),
        Binding("u", "uncordon", "Uncordon"),
        *TableScreen.FILTER_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, Node] = {}
        self.checks: dict[str, tuple[str, dict]] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: name, datacenter, status…", id="filter", classes="hidden")
        with Horizontal():
            yield RecordTable(id="nodes-table", cursor_type="row", zebra_stripes=True)
            yield Static("No node selected.", id="details")
        yield Footer()

    @work(thread=True, exclusive=True, exit_on_error=False, group="load", name="Loading nodes")
    def _load(self) -> None:
        from tui.cluster_check_runner import node_verdicts

        self.post_message(NodesLoaded(self.app.node_pool.list(), node_verdicts(self.app.service.store)))

    @on(NodesLoaded)
    def _show(self, message: NodesLoaded) -> None:
        self.nodes = {n.name: n for n in message.nodes}
        if message.checks is not None:
            self.checks = message.checks
        self.loaded = True
        self.refill()

    def refill(self) -> None:
        table = self.query_one(DataTable)
        selected = self.selected_key()
        table.clear()
        for node in self.nodes.values():
            if self.matches(row := node_row(node)):
                table.add_row(*formatting.cells(row), key=node.name)
        if selected in table.rows:
            table.move_cursor(row=table.get_row_index(selected))
        self._details()
        if not self.nodes:
            self.query_one("#details", Static).update(
                "No nodes yet. Press [b]i[/] to import a server over SSH (or a YAML/CSV file of"
                " servers). The built-in [b]local[/] cluster needs none.")

    @on(DataTable.RowHighlighted)
    def _details(self) -> None:
        name = self.selected_key()
        if name in self.nodes:
            self.query_one("#details", Static).update(node_details(self.nodes[name], self.checks.get(name)))

    # actions ---------------------------------------------------------------
    def action_import(self) -> None:
        self.app.open_node_import(lambda _: self.action_reload())

    def action_refresh_node(self) -> None:
        if (name := self.chosen_key("refresh")) is not None:
            self.notify(f"Gathering facts of {name}…", markup=False)
            self._refresh([name])

    @work(thread=True, exclusive=True, exit_on_error=False, group="refresh", name="Refreshing facts")
    def _refresh(self, names: list[str]) -> None:
        self.app.node_pool.refresh(names)
        self.post_message(NodesLoaded(self.app.node_pool.list()))

    def action_remove(self) -> None:
        name = self.chosen_key("remove")
        if name is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._remove(name)

        self.app.push_screen(ConfirmScreen(
            f"Remove {name} from the pool?",
            f"geotrain forgets {name} and its facts. The server itself is not touched;"
            " import it again any time.", "y  remove"), answered)

    @work(thread=True, exit_on_error=False, group="remove", name="Removing node")
    def _remove(self, name: str) -> None:
        self.app.node_pool.remove(name)
        self.post_message(NodesLoaded(self.app.node_pool.list()))

    def action_cordon(self, cordon: bool = True) -> None:
        """Keep new pods off the highlighted node (or let them back) in the cluster that lists it, a
        Kubernetes/k3s one; a node in none, or only in local, is one line saying so."""
        if (name := self.chosen_key("cordon" if cordon else "uncordon")) is not None:
            from tui.actions import cordon_node

            cordon_node(self, name, cordon)

    def action_uncordon(self) -> None:
        self.action_cordon(cordon=False)

    @on(CordonDone)
    def _cordoned(self, message: CordonDone) -> None:
        self.notify(message.sentence, markup=False)
