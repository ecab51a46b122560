"""One workspace: status and workers, live loss and bytes-sent curves, merged logs."""

from __future__ import annotations

import time

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Footer, Header, Input, Static
from textual.worker import get_current_worker

from core.backends import wandb_runs
from core.domain.terminal_text import printable
from tui import formatting
from tui.actions import ask_delete
from tui.screens.base import GeotrainScreen
from tui.log_feed import feed
from tui.messages import WorkspaceDeleted, WorkspaceStatus
from tui.widgets.log_view import LogView
from tui.widgets.loss_chart import LossChart, human_bytes
from tui.widgets.worker_utilization import WorkerUtilization


def status_text(ws, state, wandb_line: str = "", watcher_line: str = "") -> Text:
    """The status block; every value in it (reasons, worker details: from logs) is literal."""
    text = Text.assemble((ws.id, "bold"), "  on ", (ws.cluster, "bold"), "\n",
                         f"{ws.spec.model} {ws.spec.size} · preset {ws.spec.preset} · "
                         f"{ws.spec.workers} workers · {ws.spec.steps} steps\nstatus  ",
                         formatting.status(state.status))
    if state.reason:
        text.append(f"  ({printable(state.reason)})")
    if wandb_line:
        text.append(f"\n{printable(wandb_line)}")
    if watcher_line:  # a Kubernetes workspace's watcher (core.kubernetes.watcher_history)
        text.append(f"\n{printable(watcher_line)}")
    for w in state.workers:
        text.append(f"\n  {printable(w.name):<12} ").append_text(formatting.status(w.status)).append(
            f" {printable(w.detail)}")
    return text

class WorkspaceDetailScreen(GeotrainScreen):
    TITLE = "Workspace"
    AUTO_FOCUS = "#log"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("f", "follow", "Follow"),
        Binding("w", "wrap", "Wrap"),
        Binding("e", "events", "Events"),
        Binding("p", "processes", "Workers"),
        Binding("N", "notify_form", "Notify…"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "search", "Search"),
        Binding("n", "next_match", "Next match", show=False),
        Binding("d", "delete", "Delete"),
    ]

    def __init__(self, workspace_id: str) -> None:
        super().__init__()
        self.workspace_id = workspace_id
        self.sub_title = workspace_id
        self.input_mode = "filter"
        self.wandb_line = ""
        self.watcher_line = ""

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="summary"):
            yield Static("loading…", id="status")
            yield LossChart("loss", id="loss")
            yield LossChart("bytes sent", human_bytes, id="bytes")
        yield WorkerUtilization(id="utilization")
        yield Input(id="query", classes="hidden")
        yield LogView(max_lines=self.app.log_max_lines, id="log")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(LogView).focus()
        self._poll()
        self._read_logs()
        if self.app.poll_seconds:
            self.set_interval(self.app.poll_seconds, self._poll)
        self.watch(self.query_one(LogView), "following", self._show_follow)
        self.watch(self.query_one(LogView), "show_events", self._show_follow)

    # status ----------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="status", name="Workspace status")
    def _poll(self) -> None:
        service = self.app.service
        workspace = service.get(self.workspace_id)
        state = service.refresh(workspace)
        self.wandb_line = wandb_runs.summary(service.wandb_run(self.workspace_id), self.workspace_id,
                                             short=True)
        watcher = service.watcher(self.workspace_id)
        if watcher:
            from core.kubernetes import watcher_history

            self.watcher_line = watcher_history.describe(watcher, time.time())
        self.post_message(WorkspaceStatus(workspace, state, service.metrics(self.workspace_id),
                                          service.utilization_history(self.workspace_id)))

    @on(WorkspaceStatus)
    def _show_status(self, message: WorkspaceStatus) -> None:
        ws, state = message.workspace, message.state
        self.query_one("#status", Static).update(status_text(ws, state, self.wandb_line, self.watcher_line))
        rows = message.metrics
        self.query_one("#loss", LossChart).set_points(
            [(r["step"], r["loss"]) for r in rows if r.get("loss") is not None and "step" in r])
        self.query_one("#bytes", LossChart).set_points(
            [(r["step"], r["bytes_sent"]) for r in rows
             if r.get("bytes_sent") is not None and "step" in r])
        self.query_one(WorkerUtilization).show(message.utilization)

    # logs ------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="logs", name="Reading logs")
    def _read_logs(self) -> None:
        view = self.query_one(LogView)
        worker = get_current_worker()
        lines = self.app.service.logs(self.workspace_id, follow=True)
        feed(lines, view.post_message, view.gate, lambda: worker.is_cancelled)

    def _show_follow(self, _value: bool = True) -> None:
        view = self.query_one(LogView)
        view.border_title = "logs"
        subtitle = "following the end" if view.following else "paused · f follows"
        view.border_subtitle = subtitle if view.show_events else f"{subtitle} · events hidden"

    def action_events(self) -> None:
        """Hide or show geotrain's own event lines (joined, recovered, data ready …)."""
        view = self.query_one(LogView)
        view.show_events = not view.show_events

    def action_follow(self) -> None:
        self.query_one(LogView).follow()

    def action_wrap(self) -> None:
        view = self.query_one(LogView)
        view.wrap = not view.wrap

    # filter and search -----------------------------------------------------
    def _open_query(self, mode: str, placeholder: str) -> None:
        self.input_mode = mode
        box = self.query_one("#query", Input)
        box.placeholder = placeholder
        box.value = ""
        box.remove_class("hidden")
        box.focus()

    def action_filter(self) -> None:
        self._open_query("filter", "filter: show only lines containing…")

    def action_search(self) -> None:
        self._open_query("search", "search: highlight and jump to…")

    @on(Input.Changed, "#query")
    def _query_changed(self, event: Input.Changed) -> None:
        if self.input_mode == "filter":
            self.query_one(LogView).set_filter(event.value)

    @on(Input.Submitted, "#query")
    def _query_done(self, event: Input.Submitted) -> None:
        view = self.query_one(LogView)
        if self.input_mode == "search":
            if not view.search(event.value):
                self.notify(f"{event.value!r} not found", severity="warning", markup=False)
        view.focus()

    def action_next_match(self) -> None:
        view = self.query_one(LogView)
        view.search(self.query_one("#query", Input).value)

    def action_back(self) -> None:
        box = self.query_one("#query", Input)
        if box.has_focus or not box.has_class("hidden"):
            if self.input_mode == "filter":
                self.query_one(LogView).set_filter("")
            box.add_class("hidden")
            self.query_one(LogView).focus()
            return
        self.app.pop_screen()

    def action_processes(self) -> None:
        """Down to the workers: processes or pods, their detail, a shell."""
        self.app.open_processes(self.workspace_id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="notify", name="Notifications")
    def action_notify_form(self) -> None:
        """Set or clear the webhook/command (tui/modals/notify_form.py); on Kubernetes the webhook only,
        sent by the watcher in the cluster; where neither sends, one line says so."""
        service = self.app.service
        cluster = service.get(self.workspace_id).cluster
        backend = service.backend(cluster)
        if not (backend.NOTIFIES or backend.WEBHOOK_IN_CLUSTER):
            self.app.call_from_thread(self.notify, f"{self.workspace_id} runs on {cluster}, whose workspaces send "
                                      "no notifications", severity="warning", markup=False)
            return
        from tui.modals.notify_form import NotifyFormScreen

        def done(outcome: str | None) -> None:
            if outcome:
                self.notify(f"Notifications of {self.workspace_id} {outcome}"
                            + (" (kept as secrets, not shown)" if outcome == "saved" else ""), markup=False)

        self.app.call_from_thread(self.app.push_screen, NotifyFormScreen(self.workspace_id, backend if backend.WEBHOOK_IN_CLUSTER else None), done)

    def action_delete(self) -> None:
        ask_delete(self, self.workspace_id)

    @on(WorkspaceDeleted)
    def _deleted(self, message: WorkspaceDeleted) -> None:
        self.notify(f"Deleted {message.workspace_id}", markup=False)
        self.app.pop_screen()
