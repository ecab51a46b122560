"""Set or clear a workspace's notifications (issue 43): a webhook address, typed hidden and never shown
back in full (scheme and host only), and/or a local command; both kept in the secret store (0600) by
core.backends.local.notifier.keep, checked before either is kept. Enter saves, ctrl+r removes both.

On a Kubernetes workspace (`backend` given: core.backends.kubernetes_notify) the watcher in the cluster
sends: the address goes into the workspace's Secret, written from a thread (the cluster answers in its
own time), and there is no command field (a command would run on this machine)."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from core.backends.local import notifier
from core.domain.notifications import EVENTS
from core.domain.terminal_text import printable
from core.domain.notifications import check_url
from core.errors import GeotrainError


def kept_line(url: str | None, program: str | None) -> Text:
    if not url and not program:
        return Text("Now: nothing set.", style="dim")
    parts = [f"webhook {url}" if url else "", f"command {program} …" if program else ""]
    return Text("Now: " + " · ".join(p for p in parts if p), style="bold")


class NotifyFormScreen(ModalScreen["str | None"]):
    """Dismissed with 'saved', 'cleared' or None (nothing changed)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+r", "clear", "Remove both")]

    def __init__(self, workspace_id: str, backend=None) -> None:
        super().__init__()
        self.workspace_id, self.backend = workspace_id, backend

    def _in_cluster(self) -> ComposeResult:
        yield Static(f"Notifications of {self.workspace_id}", classes="dialog-title", markup=False)
        yield Static(f"{', '.join(EVENTS)} go to a webhook (a JSON POST), sent by the workspace's watcher in the "
                     "cluster, with this machine off. The address is kept in a Kubernetes Secret, never shown; "
                     "a local command is not offered here (it would run on this machine).",
                     classes="dialog-body", markup=False)
        yield Static(Text("Now: whatever the cluster's Secret holds (not read back).", style="dim"), id="notify-now")
        yield Label("Webhook URL (hidden as you type; empty keeps what is set)")
        yield Input(password=True, placeholder="https://hooks.example.com/…", id="notify-url")
        yield Static("", id="notify-error", classes="field-error")
        yield Static(Text.assemble(("enter", "bold"), "  save    ", ("ctrl+r", "bold"), "  remove    ",
                                   ("esc", "bold"), "  cancel"), classes="dialog-keys")

    def compose(self) -> ComposeResult:
        secrets = self.app.service.secrets
        if self.backend is not None:
            with Vertical(id="dialog", classes="notify"):
                yield from self._in_cluster()
            return
        with Vertical(id="dialog", classes="notify"):
            yield Static(f"Notifications of {self.workspace_id}", classes="dialog-title", markup=False)
            yield Static(f"{', '.join(EVENTS)} go to a webhook (a JSON POST) and/or a local command (the event as "
                         "JSON on its stdin, run without a shell). Both are kept as secrets, never shown in full.",
                         classes="dialog-body", markup=False)
            yield Static(kept_line(*notifier.shown(secrets, self.workspace_id)), id="notify-now")
            yield Label("Webhook URL (hidden as you type; empty keeps what is set)")
            yield Input(password=True, placeholder="https://hooks.example.com/…", id="notify-url")
            yield Label("Command (program and arguments; empty keeps what is set)")
            yield Input(placeholder="notify-send geotrain", id="notify-command")
            yield Static("", id="notify-error", classes="field-error")
            yield Static(Text.assemble(("enter", "bold"), "  save    ", ("tab", "bold"), "  next field    ",
                                       ("ctrl+r", "bold"), "  remove both    ", ("esc", "bold"), "  cancel"),
                         classes="dialog-keys")

    def on_mount(self) -> None:
        self.query_one("#notify-url", Input).focus()

    @on(Input.Submitted)
    def save(self) -> None:
        url = self.query_one("#notify-url", Input).value.strip() or None
        if self.backend is not None:
            if url is None:
                self.dismiss(None)
                return
            self._cluster("saved", lambda: self.backend.set_notify_url(self.workspace_id, check_url(url)))
            return
        command = self.query_one("#notify-command", Input).value.strip() or None
        if url is None and command is None:
            self.dismiss(None)
            return
        try:
            notifier.keep(self.app.service.secrets, self.workspace_id, url=url, command=command)
        except GeotrainError as exc:  # says what is wrong without repeating the value
            self.query_one("#notify-error", Static).update(Text(printable(str(exc))))
            return
        self.dismiss("saved")

    def _cluster(self, outcome: str, call) -> None:
        """The cluster's part in a thread; the form stays up with the reason when it fails."""
        def run() -> None:
            try:
                call()
            except GeotrainError as exc:  # says what is wrong without repeating the address
                self.app.call_from_thread(self.query_one("#notify-error", Static).update, Text(printable(str(exc))))
                return
            self.app.call_from_thread(self.dismiss, outcome)

        self.run_worker(run, thread=True, exclusive=True, exit_on_error=False, name="notify secret")

    def action_clear(self) -> None:
        if self.backend is not None:
            self._cluster("cleared", lambda: self.backend.clear_notify(self.workspace_id))
            return
        notifier.forget(self.app.service.secrets, self.workspace_id)
        self.dismiss("cleared")

    def action_cancel(self) -> None:
        self.dismiss(None)
