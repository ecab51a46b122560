"""Clusters (issue 43): every cluster with its last `clusters check`; `k` checks the highlighted one in
a thread (the same core calls and kept result as `geotrain clusters check`), `c`/`u` cordon and
uncordon the node highlighted in the check's table (Kubernetes and wizard-built k3s clusters). The check
and the kept result are core.cluster_checks' (local, SSH-built and Kubernetes clusters)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Input, Static

from core.domain.records import Cluster
from core.domain.terminal_text import printable
from core.errors import GeotrainError
from tui import formatting
from tui.screens.table_screen import TableScreen
from tui.widgets.check_results import CheckResults, failing_nodes
from tui.messages import CordonDone
from tui.widgets.record_table import RecordTable

COLUMNS = ("name", "kind", "status", "nodes", "last check")


@dataclass
class ClustersLoaded(Message):
    """Every cluster and its kept check result (None: never checked)."""

    clusters: list[Cluster]
    checks: dict[str, dict | None]


@dataclass
class CheckProgress(Message):
    """A stage of the running check, in words ("fra-1: burn-in")."""

    line: str


@dataclass
class CheckFinished(Message):
    cluster: str
    result: dict | None
    error: str = ""


def members(cluster: Cluster) -> list[str]:
    """The cluster's node names as recorded (wizard nodes, or a registered cluster's node groups)."""
    names = list(cluster.nodes)
    for group in cluster.config.get("node_groups") or []:
        names += [str(n) for n in group.get("nodes") or [] if str(n) not in names]
    return names


def check_cell(result: dict | None, now: float) -> Text:
    if result is None:
        return Text("never", style="dim")
    ago = formatting.age(max(0.0, now - result.get("checked_at", now)))
    if result.get("ok"):
        return Text(f"all good, {ago} ago", style="green")
    return Text(f"{len(failing_nodes(result))} failing, {ago} ago", style="bold red")


class ClustersScreen(TableScreen):
    TITLE = "Clusters"
    AUTO_FOCUS = "#clusters"
    COLUMNS = COLUMNS
    NOUN = "cluster"
    BINDINGS = [
        Binding("k", "check", "Check"),
        Binding("c", "cordon", "Cordon node"),
        Binding("u", "uncordon", "Uncordon node"),
        Binding("tab", "app.focus_next", "Next table", show=False),
        Binding("r", "reload", "Refresh"),
        *TableScreen.FILTER_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.clusters: dict[str, Cluster] = {}
        self.checks: dict[str, dict | None] = {}
        self.cordoned: dict[tuple[str, str], bool] = {}
        self.checking: str | None = None
        self.pending_check: str | None = None
        self.stage = ""
        self.started = 0.0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: name, kind, status, nodes…", id="filter", classes="hidden")
        yield RecordTable(id="clusters", cursor_type="row", zebra_stripes=True)
        yield CheckResults(id="check")
        yield Static("", id="check-progress", classes="hint hidden")
        yield Footer()

    def _on_mount(self) -> None:  # TableScreen.on_mount runs too (Textual calls each class's handler)
        self.set_interval(0.5, self._progress)

    @work(thread=True, exclusive=True, exit_on_error=False, group="load", name="Loading clusters")
    def _load(self) -> None:
        from core.cluster_checks import last_check
        from core.state.cluster_records import list_clusters

        store = self.app.service.store
        clusters = list_clusters(store)
        self.post_message(ClustersLoaded(clusters, {c.name: last_check(store, c.name) for c in clusters}))

    @on(ClustersLoaded)
    def _show(self, message: ClustersLoaded) -> None:
        self.clusters = {c.name: c for c in message.clusters}
        self.checks = message.checks
        self.loaded = True
        self.refill()
        if self.pending_check in self.clusters:
            self.check_when_loaded(self.pending_check)
        elif self.pending_check:
            self.notify(f"{self.pending_check} is not among the clusters: nothing checked", severity="warning",
                        markup=False)
            self.pending_check = None

    def check_when_loaded(self, cluster: str) -> None:
        """Highlight `cluster` and check it, once the list has come in (from the wizard's done screen)."""
        if not self.loaded or cluster not in self.clusters:
            self.pending_check = cluster
            if self.loaded:
                self.action_reload()  # the wizard just recorded it
            return
        self.pending_check = None
        self.filter_text = ""
        self.refill()
        table = self.query_one("#clusters", DataTable)
        table.move_cursor(row=table.get_row_index(cluster))
        self.action_check()

    def refill(self) -> None:
        table = self.query_one("#clusters", DataTable)
        selected = self.selected_key()
        table.clear()
        now = self.app.clock()
        for c in self.clusters.values():
            nodes = ",".join(members(c)) or ("this machine" if c.kind == "local" else "-")
            row = (c.name, c.kind, formatting.status(c.status), nodes, check_cell(self.checks.get(c.name), now))
            if self.matches(row[:4]):
                table.add_row(*formatting.cells(row), key=c.name)
        if selected in table.rows:
            table.move_cursor(row=table.get_row_index(selected))
        self._details()

    def selected_key(self) -> str | None:
        table = self.query_one("#clusters", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    @on(DataTable.RowHighlighted, "#clusters")
    def _details(self) -> None:
        name = self.selected_key()
        if name is None and self.loaded:  # the filter hides every cluster
            self.query_one(CheckResults).show("", None, self.app.clock())
        if name in self.clusters:
            cordoned = {node: on for (cluster, node), on in self.cordoned.items() if cluster == name}
            self.query_one(CheckResults).show(name, self.checks.get(name), self.app.clock(),
                                              members(self.clusters[name]), cordoned)

    # check -----------------------------------------------------------------
    def action_check(self) -> None:
        name = self.chosen_key("check")
        if name is None:
            return
        if self.checking:
            self.notify(f"{self.checking} is being checked; wait for it to end", severity="warning", markup=False)
            return
        self.checking, self.started = name, self.app.clock()
        self.stage = "burning in each device, then an all-reduce of the presets' payload"
        self._progress()
        self._check(name)

    @work(thread=True, exit_on_error=False, group="check", name="Cluster check")
    def _check(self, name: str) -> None:
        from core.cluster_checks import run_check

        try:
            result = run_check(self.app.service.store, name,
                               progress=lambda line: self.post_message(CheckProgress(printable(line)[:200])),
                               **self.app.check_options)
        except GeotrainError as exc:
            self.post_message(CheckFinished(name, None, printable(str(exc))))
            return
        self.post_message(CheckFinished(name, result))

    def _progress(self) -> None:
        line = self.query_one("#check-progress", Static)
        if self.checking:
            line.update(Text(f"Checking {self.checking}: {self.stage}… {self.app.clock() - self.started:.0f}s"))
        line.set_class(not self.checking, "hidden")  # hidden from the first frame: no line that comes and goes

    @on(CheckProgress)
    def _stage(self, message: CheckProgress) -> None:
        self.stage = message.line
        self._progress()

    @on(CheckFinished)
    def _checked(self, message: CheckFinished) -> None:
        self.checking = None
        self._progress()
        if message.error:
            self.notify(f"Not checked: {message.error}", severity="error", markup=False)
            return
        self.checks[message.cluster] = message.result
        bad = failing_nodes(message.result)
        self.notify(f"{message.cluster}: all good" if not bad else
                    f"{message.cluster}: {', '.join(bad)} failing (c cordons the highlighted node)",
                    severity="information" if not bad else "warning", markup=False)
        self.refill()

    # cordon ----------------------------------------------------------------
    def action_cordon(self, cordon: bool = True) -> None:
        cluster = self.chosen_key("cordon" if cordon else "uncordon")
        if cluster is None:
            return
        from core.kubernetes.cordon import why_not_applicable

        if why := why_not_applicable(self.clusters[cluster]):
            self.notify(f"{'Cordon' if cordon else 'Uncordon'} does not apply: {why}", severity="warning", markup=False)
            return
        node = self.query_one(CheckResults).highlighted_node()
        if node is None:
            self.notify(f"{cluster} lists no nodes yet: press k to check it first", severity="warning", markup=False)
            return
        from tui.actions import cordon_node

        cordon_node(self, node, cordon, cluster)

    def action_uncordon(self) -> None:
        self.action_cordon(cordon=False)

    @on(CordonDone)
    def _cordoned(self, message: CordonDone) -> None:
        self.cordoned[(message.cluster, message.node)] = message.unschedulable
        self.notify(message.sentence, markup=False)
        self._details()
