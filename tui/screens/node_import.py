"""Importing servers into the node pool: one host, or a YAML/CSV file of hosts.

Problems a person can fix (bad endpoint, unreachable host, refused key) are shown
under the form; host keys are confirmed in a modal, as ssh itself would ask."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Footer, Header, Input, Static

from core.domain.terminal_text import printable
from core.errors import GeotrainError
from core.nodes.import_file import read_import_file
from core.nodes.pool import ImportRequest
from core.schema.endpoints import parse_endpoint
from tui.widgets.form_field import FormField
from tui.messages import FormProblem, NodesImported
from tui.screens.base import GeotrainScreen


def requests_from(fields: dict[str, str]) -> list[ImportRequest]:
    """What the form asks for; raises InvalidInput on what it can check itself."""
    if fields["file"]:
        return read_import_file(fields["file"])
    user, host, port = parse_endpoint(fields["endpoint"], fields["username"] or None)
    return [ImportRequest(name=fields["name"], host=host, port=port,
                          username=user or fields["username"], key_path=fields["key"] or None,
                          jump=fields["jump"] or None, datacenter=fields["datacenter"] or None)]


class NodeImportScreen(GeotrainScreen):
    TITLE = "Import nodes"
    AUTO_FOCUS = "#name"
    BINDINGS = [Binding("escape", "cancel", "Cancel"),
                Binding("ctrl+s", "import", "Import", priority=True)]

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(classes="form"):
            yield Static("One server", classes="step-title")
            with Horizontal(classes="row"):
                yield FormField("Name", Input(placeholder="gpu-1", id="name"))
                yield FormField("Endpoint  [user@]host[:port]", Input(placeholder="203.0.113.7", id="endpoint"))
                yield FormField("Username", Input("root", id="username"))
            with Horizontal(classes="row"):
                yield FormField("SSH key path (empty: the SSH agent)",
                             Input(placeholder="~/.ssh/id_ed25519", id="key"))
                yield FormField("Jump host (optional)", Input(placeholder="user@bastion:22", id="jump"))
                yield FormField("Datacenter (optional)", Input(placeholder="frankfurt", id="datacenter"))
            yield Static("…or a YAML/CSV file listing servers (all are imported, or none)",
                         classes="step-title")
            yield FormField("File", Input(placeholder="servers.yaml", id="file"))
            yield Static("", id="form-error", classes="field-error", markup=False)
            with Horizontal(classes="form-buttons"):
                yield Button("Import", id="import", variant="primary")
                yield Button("Cancel", id="cancel")
        yield Footer()

    @on(Button.Pressed, "#import")
    def action_import(self) -> None:
        self.query_one("#form-error", Static).update("contacting…")
        self._import({box.id: box.value.strip() for box in self.query(Input)})

    @work(thread=True, exclusive=True, exit_on_error=False, group="import", name="Import")
    def _import(self, fields: dict[str, str]) -> None:
        try:
            nodes = self.app.node_pool.import_nodes(requests_from(fields))
        except GeotrainError as exc:  # the person can fix these: shown under the form
            self.post_message(FormProblem(str(exc)))
            return
        self.post_message(NodesImported(nodes))

    @on(FormProblem)
    def _problem(self, message: FormProblem) -> None:
        self.query_one("#form-error", Static).update(Text(f"✗ {printable(message.text)}"))  # foreign text

    @on(NodesImported)
    def _imported(self, message: NodesImported) -> None:
        self.notify(f"Imported {', '.join(n.name for n in message.nodes)}", markup=False)
        self.dismiss(message.nodes)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
