"""The cluster wizard: pick nodes → options → preflight → deploy (a bar per node and
step; `l` shows a node's log) → done (network matrix; `k` imports the kubeconfig; `c` checks the new
cluster's devices and collective in the Clusters view, the same check as its `k` key)."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import (Checkbox, ContentSwitcher, Footer, Header, Input, Label,
                             SelectionList, Static)
from textual.widgets.selection_list import Selection

from core.bootstrap.failures import check_bundle
from core.domain.records import Node
from core.domain.terminal_text import printable
from core.errors import InvalidInput
from core.state.node_records import list_nodes
from tui.cluster_builder import WizardRequest
from tui.messages import BuildFinished, NodeProgress, NodesLoaded
from tui.screens.base import GeotrainScreen
from tui.widgets.net_matrix import NetMatrix
from tui.widgets.progress_table import ProgressTable
from tui.widgets.release_checksums import ReleaseChecksums

STAGES = ("pick", "options", "preflight", "deploy", "done")
TITLES = {"pick": "1 · pick nodes (space selects, enter continues)",
          "options": "2 · options (enter continues)",
          "preflight": "3 · preflight: can every node take part?",
          "deploy": "4 · deploying (l: the selected node's log)",
          "done": "5 · done"}


IMPORT_HINT = ("[b]k[/] import the kubeconfig into ~/.kube/config   [b]c[/] check the cluster (burn-in, all-reduce)"
               "   [b]esc[/] back to the start")
NO_K3S_HINT = ("k3s did not come up, so there is no kubeconfig to import. Fix what failed above "
               "(nodes without internet: esc, then give the air-gap bundle dir) and deploy again.   "
               "[b]esc[/] back to the start")


class ClusterWizardScreen(GeotrainScreen):
    TITLE = "Cluster wizard"
    BINDINGS = [
        Binding("enter", "next", "Next", priority=True),
        Binding("escape", "back", "Back"),
        Binding("l", "node_log", "Node log"),
        Binding("k", "import_kubeconfig", "Import kubeconfig"),
        Binding("c", "check_cluster", "Check cluster"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.stage = "pick"
        self.request: WizardRequest | None = None
        self.outcomes: dict[str, object] = {}
        self.nodes: dict[str, Node] = {}  # as loaded, by name: their architectures

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(TITLES["pick"], id="stage-title", classes="step-title")
        with ContentSwitcher(initial="pick", id="stages"):
            yield SelectionList[str](id="pick")
            with VerticalScroll(id="options", classes="form"):
                yield Label("Cluster name")
                yield Input("gpu-cluster", id="cluster-name")
                yield Checkbox("WireGuard mesh between the nodes (VPN)", True, id="vpn")
                yield Label("Mesh subnet (empty: the default)")
                yield Input(placeholder="10.90.0.0/24", id="subnet")
                yield Checkbox("Pull the workspace image on every node now (10-50 GB each; off: at the first workspace)",
                               True, id="prepull")
                yield Label("Air-gap bundle dir for nodes without internet (empty: download k3s)")
                yield Input(placeholder="/path/to/k3s-bundle", id="k3s-bundle")
                yield ReleaseChecksums(id="checksums")
            yield Vertical(id="preflight")
            yield Vertical(id="deploy")
            with Vertical(id="done"):
                yield Static("", id="build-summary", markup=False)
                yield Label("Network matrix (latency · bandwidth between nodes)")
                yield NetMatrix(id="matrix")
                yield Static(IMPORT_HINT, id="done-hint", classes="hint")
        yield Static("", id="wizard-error", classes="field-error", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self._load_nodes()

    @work(thread=True, exclusive=True, exit_on_error=False, group="load", name="Loading nodes")
    def _load_nodes(self) -> None:
        self.post_message(NodesLoaded(list_nodes(self.app.service.store)))

    @on(NodesLoaded)
    def _nodes(self, message: NodesLoaded) -> None:
        picker = self.query_one("#pick", SelectionList)
        picker.clear_options()
        self.nodes = {node.name: node for node in message.nodes}
        for node in message.nodes:
            free = node.status == "AVAILABLE"
            label = f"{node.name:<14} {node.datacenter or '—':<12} {node.status}"
            if node.blockers:
                label += f"  ({node.blockers[0][:60]})"
            picker.add_option(Selection(label, node.name, False, disabled=not free))
        if message.nodes:
            picker.highlighted = 0
        else:
            self._error("The pool has no nodes: import some on the Nodes screen (press 2, then i).")
        picker.focus()

    # moving between stages -------------------------------------------------
    def _go(self, stage: str) -> None:
        self.stage = stage
        self.query_one("#stages", ContentSwitcher).current = stage
        self.query_one("#stage-title", Static).update(TITLES[stage])
        self._error("")
        self.refresh_bindings()

    def _error(self, text: str) -> None:
        self.query_one("#wizard-error", Static).update(text and f"✗ {printable(text)}")

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        allowed = {"node_log": ("preflight", "deploy", "done"), "import_kubeconfig": ("done",), "check_cluster": ("done",),
                   "next": ("pick", "options", "preflight")}
        if action in ("import_kubeconfig", "check_cluster") and not self._k3s_up():
            return False  # never offer a kubeconfig that k3s did not write
        return self.stage in allowed.get(action, STAGES)

    def _k3s_up(self) -> bool:
        outcome = self.outcomes.get("deploy")
        return bool(outcome is not None and getattr(outcome, "k3s_up", True))

    def action_next(self) -> None:
        if self.stage == "pick":
            if not self.query_one("#pick", SelectionList).selected:
                self._error("select at least one node (space), then enter")
                return
            self._go("options")
            picked = self.query_one("#pick", SelectionList).selected
            self.query_one(ReleaseChecksums).select([self.nodes[n] for n in picked])
            self.query_one("#cluster-name", Input).focus()
        elif self.stage == "options":
            bundle = self.query_one("#k3s-bundle", Input).value.strip() or None
            try:
                if bundle:
                    check_bundle(bundle, "air-gap bundle")
                sha256, unverified = self.query_one(ReleaseChecksums).read()
            except InvalidInput as exc:
                self._error(str(exc))
                return
            self.request = WizardRequest(
                name=self.query_one("#cluster-name", Input).value.strip(),
                nodes=list(self.query_one("#pick", SelectionList).selected),
                vpn=self.query_one("#vpn", Checkbox).value,
                subnet=self.query_one("#subnet", Input).value.strip() or None,
                prepull=self.query_one("#prepull", Checkbox).value, k3s_bundle=bundle,
                sha256=sha256, insecure_skip_checksum=unverified)
            self._start("preflight", ["preflight"])
        elif self.stage == "preflight":
            outcome = self.outcomes.get("preflight")
            if outcome is None:
                return
            if not outcome.ok:
                self._error("a node is blocked: fix what the table says, then esc and retry")
                return
            self._start("deploy", None)

    @on(Input.Changed, "#k3s-bundle")
    def _bundle_changed(self, event: Input.Changed) -> None:
        self.query_one(ReleaseChecksums).set_bundle(bool(event.value.strip()))

    def action_back(self) -> None:
        if self.stage in ("pick",):
            self.app.switch_mode("workspaces")
        elif self.stage == "deploy" and "deploy" not in self.outcomes:
            self.notify("the deploy keeps running; wait for it to finish", severity="warning")
        else:  # focus follows: keys went on to the hidden stage's widget
            back = "options" if self.stage == "preflight" else "pick"
            self._go(back)
            self.query_one("#cluster-name" if back == "options" else "#pick").focus()

    # preflight and deploy --------------------------------------------------
    def _start(self, stage: str, only: list[str] | None) -> None:
        self.outcomes.pop(stage, None)
        self._go(stage)
        self._prepare(stage, only)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard", name="Cluster wizard")
    def _prepare(self, stage: str, only: list[str] | None) -> None:
        builder = self.app.cluster_builder
        steps = only or builder.steps(self.request.vpn, self.request.prepull)
        self.app.call_from_thread(self._mount_table, stage, steps)
        run = builder.preflight if stage == "preflight" else builder.deploy
        outcome = run(self.request, lambda event: self.post_message(NodeProgress(event)))
        self.post_message(BuildFinished(stage, outcome))

    async def _mount_table(self, stage: str, steps: list[str]) -> None:
        box = self.query_one(f"#{stage}", Vertical)
        await box.remove_children()  # a retry mounts the same ids: the old ones must be gone
        table = ProgressTable(self.request.nodes, steps, id=f"{stage}-table")
        await box.mount(table, Static("", id=f"{stage}-summary", markup=False))
        table.focus()

    @on(NodeProgress)
    def _progress(self, message: NodeProgress) -> None:
        event = message.event
        for table in self.query(ProgressTable):
            table.update_event(event.node, event.step, event.progress, event.message, event.state)

    @on(BuildFinished)
    def _finished(self, message: BuildFinished) -> None:
        outcome = message.outcome
        self.outcomes[message.stage] = outcome
        lines = [printable(line) for line in outcome.lines]  # may end with a server's words
        if message.stage == "preflight":
            verdict = ("All nodes can take part: press enter to deploy." if outcome.ok else
                       "Blocked: nothing was changed. Fix the above, then esc and retry.")
            self.query_one("#preflight-summary", Static).update("\n".join(lines + [verdict]))
            return
        self.query_one("#deploy-summary", Static).update("\n".join(lines))
        self.query_one("#build-summary", Static).update(
            "\n".join(lines) + ("\nCluster ready." if outcome.ok else
                                "\nSome nodes failed: see their logs (l)."))
        self.query_one("#done-hint", Static).update(IMPORT_HINT if self._k3s_up() else NO_K3S_HINT)
        self.query_one(NetMatrix).show(self.app.cluster_builder.net_matrix(self.request.name))
        self._go("done")

    def action_node_log(self) -> None:
        tables = [t for t in self.query(ProgressTable) if t.display]
        node = tables[-1].selected_node() if tables else None
        if node and self.request:
            self.app.open_node_log(node, self.app.cluster_builder.node_log(self.request.name, node))

    def action_import_kubeconfig(self) -> None:
        if self.request and self._k3s_up():
            self._import_kubeconfig(self.request.name)

    def action_check_cluster(self) -> None:
        if self.request and self._k3s_up():
            self.app.open_cluster_check(self.request.name)

    @work(thread=True, exclusive=True, exit_on_error=False, group="kube", name="Kubeconfig import")
    def _import_kubeconfig(self, name: str) -> None:
        text = self.app.cluster_builder.import_kubeconfig(name)
        self.app.call_from_thread(self.notify, text)
