"""Actions more than one screen offers (deleting a workspace), so screens need not import each other."""

from __future__ import annotations

from textual import work
from textual.screen import Screen

from tui.messages import WorkspaceDeleted
from tui.modals.confirm import ConfirmScreen


def ask_delete(screen: Screen, workspace_id: str) -> None:
    """Say what will be lost, then delete on `y` (in a thread) and tell `screen`."""
    service = screen.app.service

    def answered(yes: bool | None) -> None:
        if yes:
            _delete(screen, workspace_id)

    @work(thread=True, exit_on_error=False, group="delete", name="Preparing delete")
    def _ask(self) -> None:
        text = service.what_will_be_lost(workspace_id)
        self.app.call_from_thread(self.app.push_screen,
                                  ConfirmScreen(f"Delete {workspace_id}?", text), answered)

    _ask(screen)


@work(thread=True, exit_on_error=False, group="delete", name="Delete")
def _delete(screen: Screen, workspace_id: str) -> None:
    screen.app.service.delete(workspace_id)
    screen.post_message(WorkspaceDeleted(workspace_id))
