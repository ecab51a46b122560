"""Actions more than one screen offers (deleting a workspace), so screens need not import each other."""

from __future__ import annotations

from textual import work
from textual.screen import Screen

from core.domain.terminal_text import printable
from core.errors import GeotrainError
from tui.messages import CordonDone, WorkspaceDeleted
from tui.modals.confirm import ConfirmScreen
from tui.modals.export_dir import ExportDirScreen


def default_export_dir(workspace_id: str) -> str:
    """Shown as typed (`~` is expanded when exporting), so it reads the same for everyone."""
    return f"~/geotrain-exports/{workspace_id}"


def ask_delete(screen: Screen, workspace_id: str, note: str = "") -> None:
    """Say what will be lost, then delete on `y` (in a thread) and tell `screen`; `e` exports
    first (asks for a directory) and asks again."""
    service = screen.app.service

    def answered(answer: bool | str | None) -> None:
        if answer == "e":
            screen.app.push_screen(ExportDirScreen(workspace_id, default_export_dir(workspace_id)),
                                   chosen)
        elif answer is True:
            _delete(screen, workspace_id)

    def chosen(directory: str | None) -> None:
        if directory:
            _export(screen, workspace_id, directory)
        else:
            ask_delete(screen, workspace_id)

    @work(thread=True, exit_on_error=False, group="delete", name="Preparing delete")
    def _ask(self) -> None:
        text = service.what_will_be_lost(workspace_id)
        self.app.call_from_thread(self.app.push_screen,
                                  ConfirmScreen(f"Delete {workspace_id}?", note + text,
                                                other_keys={"e": "export first"}), answered)

    _ask(screen)


@work(thread=True, exit_on_error=False, group="delete", name="Export")
def _export(screen: Screen, workspace_id: str, directory: str) -> None:
    app = screen.app
    try:
        manifest = app.service.export(workspace_id, directory)
    except GeotrainError as exc:
        app.call_from_thread(app.notify, f"Not exported: {printable(exc)}", severity="error", markup=False)
        app.call_from_thread(ask_delete, screen, workspace_id)
        return
    steps = manifest["checkpoint_steps"]
    note = (f"Exported to {directory} ({len(manifest['files'])} files"
            + (f", checkpoint at step {steps[-1]}" if steps else ", no checkpoint") + ").\n\n")
    app.call_from_thread(ask_delete, screen, workspace_id, note)


@work(thread=True, exit_on_error=False, group="delete", name="Delete")
def _delete(screen: Screen, workspace_id: str) -> None:
    screen.app.service.delete(workspace_id)
    screen.post_message(WorkspaceDeleted(workspace_id))


@work(thread=True, exit_on_error=False, group="cordon", name="Cordon")
def cordon_node(screen: Screen, node: str, cordon: bool, cluster: str | None = None) -> None:
    """Cordon or uncordon `node` (core.kubernetes.cordon: its cluster named, or the one listing it) and
    post CordonDone to `screen`; a refusal (local, unknown node, no rights) is one line."""
    from core.kubernetes.cordon import set_cordon  # the kubernetes client loads with the first cordon

    app = screen.app
    try:
        done = set_cordon(app.service.store, node, cordon, cluster)
    except GeotrainError as exc:
        app.call_from_thread(app.notify, printable(str(exc)), severity="error", markup=False)
        return
    screen.post_message(CordonDone(done.cluster, done.node, done.unschedulable, done.sentence()))
